# The two commands of README: `make run` and `make test`. Each sets everything up first.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# Install-time versions: pip itself, uv, and the tool that writes constraints.txt (`make lock`).
PIP_VERSION      := 26.3
UV_VERSION       := 0.13.9
PIP_TOOLS_VERSION := 7.6.2
# Who installs the lock: uv or pip. With uv the whole install took 56 s on a fresh clone here,
# against 88 s with pip (cold caches both, both compiling bytecode): a fresh machine's `make test` must fit in 10
# minutes. uv does not read pip's configuration: pip's find-links (PIP_FIND_LINKS and
# pip.conf's: where this machine keeps its CPU torch wheel) are passed on; for a private index
# in pip.conf, `make install INSTALLER=pip`.
#
# Bytecode is written as it is first imported, not compiled at install: this machine sets
# PYTHONDONTWRITEBYTECODE, under which every Ray worker would import ray from source again
# (1.3 s against 0.55 s), so make's recipes run without it. Compiling the whole venv up front
# (uv's --compile-bytecode) took about 58 s here, for 15,473 modules of which a fresh clone's
# make test imported 4,290; without it that make test took 460 s against 501 s (2026-12-05).
unexport PYTHONDONTWRITEBYTECODE
INSTALLER ?= uv
ifeq ($(INSTALLER),uv)
FIND_LINKS = $(sort $(PIP_FIND_LINKS) $(shell python3 -m pip config get global.find-links 2>/dev/null))
INSTALL = $(VENV)/bin/uv pip install --quiet --python $(PY) \
	$(foreach l,$(FIND_LINKS),--find-links $(l))
else ifeq ($(INSTALLER),pip)
INSTALL := $(PY) -m pip install --quiet
else
$(error INSTALLER=$(INSTALLER) is not an installer this Makefile knows: give INSTALLER=uv or INSTALLER=pip)
endif
# The two pins the lock is resolved around: a CPU torch on this machine's disk, the Ray we test.
PINS   := torch==2.13.0 ray==2.60.0
LOCK_ARGS ?=

REPORT ?= report/dqn-cartpole

.PHONY: install bytecode browser redis fuse net run test slow deep lint docs thorough mutants soak hunt hunt-compat hunt-speed bench bench-load compat compat-venv compat-all findings-matrix findings-report latency lock leakcheck clean

# constraints.txt pins every package the install resolves (see `make lock`); pyproject keeps
# loose ranges for users.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet pip==$(PIP_VERSION) uv==$(UV_VERSION)
	$(INSTALL) -c constraints.txt -e ".[bench,test,apps,rl,lint,fast,docs,disk]"
	$(PY) -c "from actors._trees import warm_kernels; assert warm_kernels(), 'numba did not load'"
	touch $(STAMP)

install: $(STAMP)

# raychaos's own modules as bytecode, for processes started outside make: under
# PYTHONDONTWRITEBYTECODE Python reads .pyc files but never writes them, so every Ray worker and
# CLI process would compile chaos/, actors/ and scenarios/ from source again (0.3 s a process
# here). Only what changed is compiled again; a stale .pyc is never used (Python checks the
# source's time).
bytecode: $(STAMP)
	@$(PY) -m compileall -q chaos actors scenarios

# The flagship: DQN on CartPole under mixed chaos, and its fault-free twin; report in $(REPORT).
run: $(STAMP) bytecode
	$(VENV)/bin/raychaos run dqn-cartpole --report $(REPORT)
	@$(MAKE) --no-print-directory leakcheck

# The report test renders report.html in Debian's headless Chromium.
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium)

# GCS fault tolerance needs Debian's redis-server. The harness starts its own on a free port
# and stops it; a fresh install must not leave Debian's service running (leakcheck fails on
# any redis-server left).
redis:
	@command -v redis-server >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server && \
		(systemctl disable --now redis-server 2>/dev/null || service redis-server stop 2>/dev/null || true))

# The fault filesystem (disk faults, the power-loss tests) mounts through FUSE 3: Debian's
# fuse3 brings fusermount3 and libfuse3.
fuse:
	@command -v fusermount3 >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends fuse3)

# Network faults need Debian's nftables (nft) and iproute2 (ip, tc), and root: the harness
# makes its own namespaces, links and tables, and deletes them.
net:
	@(command -v nft >/dev/null && command -v ip >/dev/null && command -v tc >/dev/null) || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		--no-install-recommends nftables iproute2)

# When pytest fails: what the Ray clusters it left behind logged last (a driver that Ray ended
# abruptly leaves its clusters' folders), then pytest's own exit code.
POSTMORTEM = { rc=$$?; $(PY) -m chaos.postmortem; exit $$rc; }

# The suite under Hypothesis's `ci` profile (pyproject's addopts), but the end-to-end runs
# marked slow: within 8 minutes here. It prints its 15 slowest tests.
test: $(STAMP) browser redis fuse net bytecode
	$(PY) -m pytest -m "not slow" --durations=15 $(PYTEST_ARGS) || $(POSTMORTEM)
	@$(MAKE) --no-print-directory leakcheck

# The end-to-end tier (CI runs it after `make test`): the flagship and its report, scenarios
# on their own clusters, the broken actors caught and shrunk. It prints its 25 slowest tests.
slow: $(STAMP) browser redis fuse net bytecode
	$(PY) -m pytest -m "slow and not deep" --durations=25 $(PYTEST_ARGS) || $(POSTMORTEM)
	@$(MAKE) --no-print-directory leakcheck

# What make slow shows once, shown again (a second shrink, a second route to a cluster, the
# library plants that measure Ray's own behaviour, the real planted split brains): about 15
# minutes here, not in CI.
deep: $(STAMP) browser redis fuse net bytecode
	$(PY) -m pytest -m deep --durations=10 $(PYTEST_ARGS) || $(POSTMORTEM)
	@$(MAKE) --no-print-directory leakcheck

# ruff over the checkout (rules in pyproject), mypy --strict on chaos/, actors/, scenarios/.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml, docs/) built into site/; --strict: a warning (a broken
# link, a missing page, a docstring that does not render) fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The suite's own properties ten times deeper (examples and steps), the Ray failpoint sweep in
# full, the partition property over twenty schedules: about 25 min here.
thorough: $(STAMP)
	$(PY) -m pytest -m property --hypothesis-profile=thorough --hypothesis-show-statistics \
		-p no:cacheprovider $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory leakcheck

# The suite's mutation score on the crash-consistency code and on the code that decides a
# run's result: plants each of ~580 small bugs and runs make test's Ray-free tests of that
# code against it (tens of minutes here; MUTANTS_ARGS="--group verdicts" for one group).
mutants: $(STAMP)
	$(PY) benchmarks/mutants.py $(MUTANTS_ARGS)

# The concurrent history driven for SOAK_SECONDS (default 600) under random-time kills.
SOAK_SECONDS ?= 600
soak: $(STAMP)
	$(PY) benchmarks/soak.py --seconds $(SOAK_SECONDS)
	@$(MAKE) --no-print-directory leakcheck

# Generated Ray programs under worker, actor and owner SIGKILLs, ray.kill, cancels, object-store
# pressure, the removal of a task's, an actor's or an object's node, GCS restarts and faults of its
# Redis, RPC failures and delays, for HUNT_MINUTES (default 30) on a cluster of its own (a head, a
# removable node, a node failing RPCs and one delaying them, its GCS on a Redis of its own): prints each
# failure class found (with the program that replays it) and how many programs exercised each
# feature and fault.
HUNT_MINUTES ?= 30
hunt: $(STAMP) redis bytecode
	$(PY) benchmarks/hunt.py --minutes $(HUNT_MINUTES)
	@$(MAKE) --no-print-directory leakcheck

# The same hunt on another Ray release's compatibility venv (`make hunt-compat RAY=2.50`): a class
# it finds there and not on the newest Ray is one Ray fixed between the two releases.
hunt-compat: redis bytecode compat-venv
	$(COMPAT_VENV)/bin/python benchmarks/hunt.py --minutes $(HUNT_MINUTES)
	$(COMPAT_VENV)/bin/python -m chaos.leakcheck

# The hunt's engine against a baseline commit's on the same HUNT_PROGRAMS programs (drawn by the
# baseline's generator, seeded), each on a hunt cluster of its own: programs a minute, and the ratio.
HUNT_PROGRAMS ?= 60
hunt-speed: $(STAMP) redis bytecode
	@test -n "$(BASELINE)" || { echo "give BASELINE=<commit> (the engine to compare with)"; exit 2; }
	$(PY) benchmarks/hunt_speed.py --programs $(HUNT_PROGRAMS) --baseline $(BASELINE)
	@$(MAKE) --no-print-directory leakcheck

# Fails when any Ray, Redis or paused process, or a namespace, link, bridge or nftables table
# of the network lab, is left on the machine.
leakcheck: $(STAMP)
	$(PY) -m chaos.leakcheck

bench: $(STAMP)
	$(PY) benchmarks/replay_buffer.py

# The attack's HTTP load generator against wrk (Debian's), on one local server.
bench-load: $(STAMP)
	@command -v wrk >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wrk)
	$(PY) benchmarks/load_generator.py

# The compatibility subset on another Ray minor release (`make compat RAY=2.55`): a venv of its
# own with that Ray's newest patch and raychaos's dependencies at the lock's versions, then the
# tests that touch Ray's private APIs and each fault kind's injection and confirmation.
RAY ?=
COMPAT_VENV = .compat/ray-$(RAY)
COMPAT_RAYS ?= 2.50 2.51 2.52 2.53 2.54 2.55 2.56 2.57 2.58 2.59 2.60
COMPAT_TESTS ?= tests/test_plugin.py tests/test_chaos_faults.py tests/test_chaos_multinode.py \
	tests/test_net_faults.py tests/test_redis_loss.py tests/test_attack.py tests/test_scenarios_run.py
# Not in the subset: what needs the rl or apps extras (torch, Tune, the flagship and its HTML
# report) and the runs that test raychaos's own handling of signals and replays, not Ray's.
COMPAT_SELECT ?= not parameter-server and not tune and not flagship and not headless and not replay_reruns \
	and not os_limit and not ctrl_c
# CI's tier (`make compat RAY=2.50 COMPAT_SCOPE=ci`, within .ci/run's hour): the subset without the
# Redis faults' scenario and its twin, drain-preemption, straggler, starvation, the exit-code check,
# owner-death (whose gets wait out their 30 s on 2.50: 150 s alone) and the plugin's test of a GCS
# that died under a test (its own naming of it), about 5 minutes of about 9; the GCS restart on
# Redis stays (the gcs-restart scenario).
COMPAT_SCOPE ?= full
ifeq ($(COMPAT_SCOPE),ci)
COMPAT_SELECT += and not redis_loss and not drain-preemption and not straggler and not starvation \
	and not broken_invariant and not owner-death and not gcs_died
else ifneq ($(COMPAT_SCOPE),full)
$(error COMPAT_SCOPE=$(COMPAT_SCOPE): give COMPAT_SCOPE=full (the default) or COMPAT_SCOPE=ci)
endif
COMPAT_EXTRA ?=
compat-venv:
	@python3 .ci/compat_requirements.py $(RAY) > /dev/null
	test -x $(COMPAT_VENV)/bin/python || python3 -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install --quiet pip==$(PIP_VERSION) uv==$(UV_VERSION)
	grep -v -E '^ray(\[|=|-)' constraints.txt > $(COMPAT_VENV)/constraints.txt
	python3 .ci/compat_requirements.py $(RAY) $(COMPAT_EXTRA) > $(COMPAT_VENV)/requirements.txt
	$(COMPAT_VENV)/bin/uv pip install --quiet --python $(COMPAT_VENV)/bin/python \
		$(foreach l,$(FIND_LINKS),--find-links $(l)) -c $(COMPAT_VENV)/constraints.txt -r $(COMPAT_VENV)/requirements.txt
	$(COMPAT_VENV)/bin/uv pip install --quiet --python $(COMPAT_VENV)/bin/python --no-deps -e .
	@$(COMPAT_VENV)/bin/python -c "import importlib.metadata as m; print('Ray', m.version('ray'), '(compat)')"

compat: redis fuse net compat-venv
	$(COMPAT_VENV)/bin/python -m pytest -m "not deep" -k "$(COMPAT_SELECT)" -p no:cacheprovider --durations=15 \
		$(COMPAT_TESTS) $(PYTEST_ARGS) \
		|| { rc=$$?; $(COMPAT_VENV)/bin/python -m chaos.postmortem; exit $$rc; }
	$(COMPAT_VENV)/bin/python -m chaos.leakcheck

# `make compat` on every supported minor release, one after another (about 8 minutes each
# here); a table of outcomes and times at the end, also in .compat/compat-all.json.
compat-all:
	python3 .ci/compat_all.py $(COMPAT_RAYS)

# Every script in findings/ on each release of RAYS (a bounded number of rounds each), its
# outcome merged into findings/matrix.json and the table in findings/README.md.
RAYS ?= $(COMPAT_RAYS)
findings-matrix: $(STAMP) redis fuse
	@for v in $(RAYS); do \
		$(MAKE) --no-print-directory compat-venv RAY=$$v COMPAT_EXTRA=findings || exit 1; \
		$(PY) .ci/findings_matrix.py --ray $$v --python .compat/ray-$$v/bin/python || exit 1; \
	done
	@$(MAKE) --no-print-directory leakcheck

# A ready-to-file issue for one finding (its docstring, command, rate, releases and nearest
# known issues): make findings-report FINDING=retry_order.py
findings-report: $(STAMP)
	@$(PY) .ci/findings_matrix.py --report "$(FINDING)"

# Schedule tick → fault confirmed, per fault kind, on 1 and 3 embedded nodes.
latency: $(STAMP)
	$(PY) benchmarks/fault_latency.py
	@$(MAKE) --no-print-directory leakcheck

# Regenerate constraints.txt with pip-tools (add LOCK_ARGS=--upgrade to move every pin to
# its newest version); pip-compile uses this machine's pip configuration, so torch resolves
# to the CPU wheel on disk.
lock:
	test -x .lock-venv/bin/pip-compile || (python3 -m venv .lock-venv && \
		.lock-venv/bin/pip install --quiet pip-tools==$(PIP_TOOLS_VERSION))
	printf '%s\n' $(PINS) > .lock-venv/pins.txt
	CUSTOM_COMPILE_COMMAND="make lock" .lock-venv/bin/pip-compile --quiet --strip-extras \
		--allow-unsafe --no-emit-index-url --no-emit-find-links --extra bench --extra test --extra apps --extra rl --extra lint --extra fast --extra docs --extra disk \
		-c .lock-venv/pins.txt $(LOCK_ARGS) \
		-o constraints.txt pyproject.toml

clean:
	rm -rf $(VENV) .lock-venv build site *.egg-info .pytest_cache .hypothesis
