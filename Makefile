# The two commands of README: `make run` and `make test`. Each sets everything up first.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

REPORT ?= report/dqn-cartpole

.PHONY: install browser run test bench leakcheck clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[bench,test]"
	touch $(STAMP)

install: $(STAMP)

# The flagship: DQN on CartPole under mixed chaos, and its fault-free twin; report in $(REPORT).
run: $(STAMP)
	$(VENV)/bin/raychaos run dqn-cartpole --report $(REPORT)
	@$(MAKE) --no-print-directory leakcheck

# The report test renders report.html in Debian's headless Chromium.
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium)

test: $(STAMP) browser
	$(PY) -m pytest $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory leakcheck

# Fails when any Ray process or paused process is left on the machine.
leakcheck: $(STAMP)
	$(PY) -m chaos.leakcheck

bench: $(STAMP)
	$(PY) benchmarks/replay_buffer.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
