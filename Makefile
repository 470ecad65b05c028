# The two commands of README: `make run` and `make test`. Each sets everything up first.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install run test bench leakcheck clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[bench]"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/raychaos run
	@$(MAKE) --no-print-directory leakcheck

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory leakcheck

# Fails when any Ray process or paused process is left on the machine.
leakcheck: $(STAMP)
	$(PY) -m chaos.leakcheck

bench: $(STAMP)
	$(PY) benchmarks/replay_buffer.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
