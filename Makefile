# Entry points: `make lab site` (a simulated DGX Spark pair, provisioned) and `make test` (everything CI runs).
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
# A venv's site-packages directory (as a shell command substitution, for recipes).
PURELIB = $$($(1)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# Molecule scenarios of the collection (extensions/molecule/<name>/molecule.yml); `default` (a syntax check) first.
ALL_SCENARIOS := $(sort $(notdir $(patsubst %/,%,$(dir $(wildcard extensions/molecule/*/molecule.yml)))))
SCENARIOS := $(filter default,$(ALL_SCENARIOS)) $(filter-out default,$(ALL_SCENARIOS))
MOLECULE_STAGES := $(addprefix molecule-,$(SCENARIOS))
# The stages of `make test`: each a target of this Makefile, run through tests/ci/stage.sh, in three lanes that run
# beside each other (tests/ci/lanes.sh), each a lab's long stage first: the fleet lab; the pair lab (its checks, the
# scenarios but vmlab), then the unit tests that run playbooks; the VM lab, then the execution
# environment (built, checked, and run by realtest) and the real-engine lab (converged on the newest ansible-core).
# The stages that need no lab (the other unit tests, the plugins' on the newest core, sanity and lint on both cores,
# the build) are a pool: each lane takes the next one when it is done, so the lanes end together. The unit tests
# first (they wait on sockets, timers and subprocesses: alone at the end, a core idled), the CPU-bound checks last,
# beside the fleet lane's end.
# Stages joined by "+" run in order in one lane: the two sanity runs (both copy ansible-test's pip stand-in into
# ~/.ansible/test/cache). The two lint runs are items of their own: two lanes end the run with them side by side (one
# after the other, the last 106 s of session 40's run used one core of two); they share no cache (tried from a clean clone).
# Stage times and the cuts that keep the run under
# 90 minutes on the 2-core CI machine: docs/design-lab.md (CI time).
# `setup` runs first, alone: what the lanes share (the newest ansible-core's venv, the node and simulator images).
VM_STAGES := $(filter molecule-vmlab,$(MOLECULE_STAGES))
# The container lab's scenarios share the pair lab's container names: they run one after the other in the pair lane.
CI_SCENARIOS := $(filter-out $(VM_STAGES),$(MOLECULE_STAGES))
LANE_FLEET := fleettest
LANE_PAIR := labtest $(CI_SCENARIOS) unit-playbooks
LANE_VM := vmlab-image $(VM_STAGES) ee realtest
LANE_POOL := unit-core unit-newest sanity-newest+sanity lint lint-newest build
TEST_STAGES := setup $(LANE_FLEET) $(LANE_PAIR) $(LANE_VM) $(subst +, ,$(LANE_POOL))
# Where tests/ci/stage.sh writes each stage's whole output (ignored by git and by the collection build).
CI_LOGS := tests/output/ci

.PHONY: venv prereqs-lab prereqs-test lab lab-down lab-fleet lab-fleet-down lab-real lab-real-down site-real site lint sanity unit labtest vmlabtest molecule \
	$(MOLECULE_STAGES) test build bench unit-newest setup lint-newest sanity-newest converge-newest converge-mitogen realtest

venv: $(VENV)/.installed $(VENV)/.ansiballz-cache $(VENV)/.payload-cache
# pip compiles every file it installs (about 25 CPU-seconds for the `ansible` package's 16,000): keep it. Where
# PYTHONDONTWRITEBYTECODE is set (this CI machine's environment), nothing compiled later is kept, and with
# --no-compile every Python process compiled what it imported again: `make test` took 430 CPU-seconds more.
$(VENV)/.installed: requirements.txt constraints.txt
	@bash tests/ci/prereqs.sh venv
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt -c constraints.txt
	touch $@

# Test venv only: modules the tests run on the controller reuse what an earlier task compiled, as on the lab nodes
# (lab/image/dspark_lab_ansiballz_cache.py says why).
$(VENV)/.ansiballz-cache: $(VENV)/.installed lab/image/dspark_lab_ansiballz_cache.py lab/image/install_ansiballz_cache.sh
	bash lab/image/install_ansiballz_cache.sh "$(call PURELIB,$(VENV))"
	touch $@

# Test venvs only: each playbook run reuses the module payloads an earlier run built, while their sources are
# unchanged (lab/controller/dspark_lab_payload_cache.py says why); on for every target here, off elsewhere. A link,
# not a copy (the venvs live in the checkout and follow it), imported by a .pth line at each interpreter start.
export DSPARK_LAB_PAYLOAD_CACHE ?= $(CURDIR)/tests/output/payload-cache
define install_payload_cache
ln -sfn $(CURDIR)/lab/controller/dspark_lab_payload_cache.py "$(call PURELIB,$(1))/dspark_lab_payload_cache.py"
echo 'import dspark_lab_payload_cache' >"$(call PURELIB,$(1))/dspark-lab-payload-cache.pth"
endef
$(VENV)/.payload-cache: $(VENV)/.installed
	$(call install_payload_cache,$(VENV))
	touch $@

# The system packages each entry point needs (Debian names), installed as root when missing; silent when present.
prereqs-lab prereqs-test: prereqs-%:
	@bash tests/ci/prereqs.sh $*

# The lab pair, the lab registry holding the SIMULATOR image (the lab inventory pins it by digest from there), and
# a FAKE checkpoint on the worker.
lab: prereqs-lab venv
	bash lab/lab.sh up
	bash lab/simulator/build.sh
	bash lab/registry.sh up
	$(BIN)/ansible-playbook -i inventories/lab/hosts.yml lab/seed_checkpoint.yml

lab-down:
	bash lab/registry.sh down
	bash lab/lab.sh down

# The SIMULATED fleet (two serving groups, five nodes) of inventories/lab-fleet, beside the pair; the
# simulator archive is built only when missing or older than its sources. Then:
#   $(BIN)/ansible-playbook -i inventories/lab-fleet/hosts.yml site.yml
LAB_FLEET := inventories/lab-fleet/hosts.yml
SIM_TAR := .lab/images/vllm-sim.tar
lab-fleet: venv
	bash lab/lab.sh up -i $(LAB_FLEET)
	$(MAKE) --no-print-directory $(SIM_TAR)
	$(BIN)/ansible-playbook -i $(LAB_FLEET) lab/seed_checkpoint.yml

lab-fleet-down:
	bash lab/lab.sh down -i $(LAB_FLEET)

# The REAL-ENGINE pair (inventories/lab-real): real vLLM (CPU build, lab/engine) serving the lab's tiny model
# (lab/model), TP=2 across two node containers over Gloo on their fabric network. First time: the engine image (about
# 2.7 GB) and the model are built (minutes; cached under .lab/ after). Then: make site-real.
LAB_REAL := inventories/lab-real/hosts.yml
lab-real: prereqs-lab venv $(SIM_TAR)
	bash lab/real.sh up

lab-real-down:
	bash lab/real.sh down

site-real: venv
	$(BIN)/ansible-playbook -i $(LAB_REAL) site.yml

$(SIM_TAR): lab/simulator/Dockerfile lab/simulator/build.sh lab/simulator/save.sh lab/save_image.sh lab/simulator/dspark_vllm_sim.py
	bash lab/simulator/save.sh $@

site: venv
	$(BIN)/ansible-playbook -i inventories/lab/hosts.yml site.yml

lint: venv
	$(BIN)/yamllint -s .
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint -q --profile production
	$(BIN)/python tests/ci/check_argument_specs.py
	$(BIN)/python tests/ci/role_docs.py --check
	$(BIN)/python tests/ci/bench_docs.py --check
	$(BIN)/python tests/ci/fleet_readme.py --check

sanity: venv
	VENV=$(CURDIR)/$(VENV) bash tests/ci/sanity.sh

unit: venv
	$(BIN)/pytest -q --durations=25 tests/unit

# `unit` in two stages of `make test`: the unit tests that run real playbooks (tests/unit/playbooks, about 60 % of
# the time; the pair lane) and all the others (the pool).
.PHONY: unit-core unit-playbooks
# The check of the metric names against vLLM's source (test_monitoring_vllm_names.py) runs in realtest, which builds
# the real-engine image it reads (tests/ci/vllm_source.sh); `make unit` runs it too.
VLLM_NAMES_TEST := tests/unit/monitoring/test_monitoring_vllm_names.py
unit-core: venv
	$(BIN)/pytest -q --durations=25 --ignore=tests/unit/playbooks --ignore=$(VLLM_NAMES_TEST) tests/unit

# The supervisor key's from= against a real sshd (tests/ci/sshd_binary.sh: unpacked from its package, not installed).
unit-playbooks: venv
	DSPARK_TEST_SSHD=$$(bash tests/ci/sshd_binary.sh) $(BIN)/pytest -q --durations=25 tests/unit/playbooks

# The newest ansible-core the collection supports (requirements-newest.txt; 2.21 needs Python 3.12+, taken from
# pyenv when it is not on PATH): the plugins' unit tests, which reach core internals (tp_ranks' member
# connections, modules built and run from an action), and dspark-fleet's runs of ansible-playbook through
# ansible-runner (the end-to-end tests and the extra vars' hand-over; the driver's own logic does not depend on the
# core and is tested once, by `unit`), in a venv of their own. The fleet tests first: they import their own
# `conftest`, which must be the first one pytest loads under that name.
# test_acceptance.py: its hostvars.py asks ansible-core's inventory, vault and templating APIs for the load test's key.
NEWEST_FLEET_TESTS := tests/unit/fleet/test_e2e.py tests/unit/fleet/test_runner_extra_vars.py tests/unit/fleet/test_acceptance.py
NEWEST_VENV := .venv-newest
NEWEST_PYTHON ?= $(shell for p in $(HOME)/.pyenv/versions/3.13*/bin/python3 $(HOME)/.pyenv/versions/3.12*/bin/python3 \
	python3.13 python3.12; do "$$p" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null && { echo "$$p"; break; }; done)
$(NEWEST_VENV)/.installed: requirements-newest.txt constraints-newest.txt
	@test -n "$(NEWEST_PYTHON)" || { echo "unit-newest: no Python 3.12+ found (set NEWEST_PYTHON=/path/to/python3.12)"; exit 1; }
	$(NEWEST_PYTHON) -m venv $(NEWEST_VENV)
	$(NEWEST_VENV)/bin/pip install -q -r requirements-newest.txt -c constraints-newest.txt
	$(call install_payload_cache,$(NEWEST_VENV))
	touch $@

# The constraints files rewritten from what requirements*.txt resolve to today (throwaway venvs without the old
# constraints; comment lines kept). Then a clean-clone CI before committing them.
.PHONY: constraints
constraints: prereqs-test
	@test -n "$(NEWEST_PYTHON)" || { echo "constraints: no Python 3.12+ found (set NEWEST_PYTHON=/path/to/python3.12)"; exit 1; }
	set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  for pair in "python3 requirements.txt constraints.txt" "$(NEWEST_PYTHON) requirements-newest.txt constraints-newest.txt"; do \
	    set -- $$pair; rm -rf "$$tmp/v"; $$1 -m venv "$$tmp/v"; "$$tmp/v/bin/pip" install -q -r $$2; \
	    { grep '^#' $$3; "$$tmp/v/bin/pip" freeze --exclude-editable; } > $$3.tmp; mv $$3.tmp $$3; \
	  done

unit-newest: $(NEWEST_VENV)/.installed
	$(NEWEST_VENV)/bin/pytest -q -p no:cacheprovider --durations=10 $(NEWEST_FLEET_TESTS) tests/unit/plugins

# ansible-lint's production profile and ansible-test sanity under the newest ansible-core.
lint-newest: $(NEWEST_VENV)/.installed
	PATH=$(CURDIR)/$(NEWEST_VENV)/bin:$$PATH $(NEWEST_VENV)/bin/ansible-lint -q --profile production

# Under the newest core every sanity test but pylint (CI time: pylint is most of a sanity run, and its checks do not
# change with the core the way validate-modules, import and ansible-doc do; `make sanity-newest SANITY_NEWEST=` runs all).
SANITY_NEWEST ?= --skip-test pylint
sanity-newest: $(NEWEST_VENV)/.installed
	VENV=$(CURDIR)/$(NEWEST_VENV) bash tests/ci/sanity.sh $(SANITY_NEWEST)

# One lab converge and its idempotence under the newest ansible-core: the pair (`make lab`), site.yml with
# .venv-newest's ansible-playbook, then again with changed=0 on every node; the lab is taken down afterwards.
converge-newest: prereqs-lab venv $(NEWEST_VENV)/.installed
	$(MAKE) --no-print-directory lab
	$(BIN)/python tests/ci/converge_twice.py $(NEWEST_VENV)/bin/ansible-playbook inventories/lab/hosts.yml site.yml; rc=$$?; \
	  $(MAKE) --no-print-directory lab-down; exit $$rc

# The lab pair converged from its bare image and again with changed=0 under Mitogen's strategy, the controller setting
# for large fleets (docs/fleet.md, controller settings); the deprecation ansible-core prints for a strategy from outside
# ansible.builtin proves the setting took effect. The lab is taken down afterwards. By hand, not in `make test` (an
# option, not the default; CI time).
converge-mitogen: prereqs-lab venv
	$(MAKE) --no-print-directory lab
	env $$($(BIN)/python bench/benchlib.py mitogen) CONVERGE_EXPECT="strategy plugins not included in ansible.builtin" \
	  $(BIN)/python tests/ci/converge_twice.py $(BIN)/ansible-playbook inventories/lab/hosts.yml site.yml; rc=$$?; \
	  $(MAKE) --no-print-directory lab-down; exit $$rc

# The REAL-ENGINE lab (make lab-real): the whole lab (real_pair, sim_pair and the router) converged twice with the
# newest ansible-core in one run each (the converge and idempotence of issue #15 point 1; the second run changed=0;
# the venv's core runs site.yml on the real pair in the roll), then playbooks/status.yml inside the
# execution environment (tests/real/test_real_ee.py), the API edge and the simulator's authentication against the
# engine (test_real_edge.py, test_auth_parity.py), `dspark-fleet acceptance` end to end (test_real_acceptance.py),
# LMCache beside both ranks (test_real_lmcache.py: a killed server and a killed worker named, the group brought back
# by dspark-fleet watch in one restart, a prompt then read from the disk tier), a sidecar engine beside the main one
# (test_real_sidecar.py: refused, started, proven, answered, removed), the real group rolled through the
# router under load (test_real_roll.py) and tests/real/test_real_engine.py (real vLLM: the proof, chat through the
# OpenAI client, the leak sweep, stop); the lab is taken down afterwards.
realtest: prereqs-lab venv $(SIM_TAR) $(NEWEST_VENV)/.installed ee-image
	bash lab/real.sh up
	DSPARK_VLLM_SRC=$$(bash tests/ci/vllm_source.sh) $(BIN)/pytest -q $(VLLM_NAMES_TEST) && \
	  $(BIN)/python tests/ci/converge_twice.py $(NEWEST_VENV)/bin/ansible-playbook $(LAB_REAL) site.yml && \
	  DSPARK_LAB_REQUIRED=1 $(BIN)/pytest -q -s tests/real/test_real_ee.py tests/real/test_real_edge.py tests/real/test_auth_parity.py \
	    tests/real/test_real_sidecar.py tests/real/test_real_acceptance.py tests/real/test_real_lmcache.py tests/real/test_real_roll.py \
	    tests/real/test_real_engine.py; rc=$$?; \
	  bash lab/real.sh down; exit $$rc

# The lab's own checks (SSH, fabric, DF ping); the lab is taken down afterwards. The checks of separate group fabrics
# and of a router need a lab that has them: fleettest runs them on the fleet lab.
LAB_MULTI_TESTS := test_groups_have_separate_fabrics or test_router_has_only_the_management_network
labtest: venv
	bash lab/lab.sh up
	DSPARK_LAB_REQUIRED=1 $(BIN)/pytest -q tests/lab -k "not ($(LAB_MULTI_TESTS))"; rc=$$?; bash lab/lab.sh down; exit $$rc

# The VM lab's own checks (boot ~80 s under emulation); not part of `make test`: the vmlab scenario boots it.
vmlabtest: venv
	bash lab/vm/vmlab.sh build
	bash lab/vm/vmlab.sh up
	DSPARK_VMLAB_REQUIRED=1 $(BIN)/pytest -q tests/vmlab; rc=$$?; bash lab/vm/vmlab.sh down; exit $$rc

build: venv
	$(BIN)/ansible-galaxy collection build --force --output-path $(VENV)/build .

# The execution environment for AWX/AAP (docs/awx.md): `ee-image` builds dspark-ee:latest from a base image made
# here (tools/ee/build.sh: debootstrap + docker import, no registry; seconds when nothing changed), `ee` also runs
# its smoke check (tools/ee/check.sh). realtest runs playbooks/status.yml inside it against the real-engine pair.
.PHONY: ee ee-image
ee-image: prereqs-lab venv
	bash lab/lab.sh engine
	bash tools/ee/build.sh

ee: ee-image
	bash tools/ee/check.sh

molecule: venv
	@for s in $(SCENARIOS); do \
	  echo "== molecule test -s $$s"; \
	  PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/molecule test -s $$s || exit 1; \
	done

# One scenario: make molecule-preflight.
# NO_COLOR: plain Ansible output for the verifiers' parsers, as under make test (Molecule forces colours otherwise).
$(MOLECULE_STAGES): molecule-%: venv
	NO_COLOR=1 PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/molecule test -s $*

bench: venv
	PATH=$(CURDIR)/$(BIN):$$PATH bash bench/run.sh

# What CI runs (.ci/run): one line per stage with its result and time; on a failure the tail of its log. The lane
# that failed stops, the others run to their end.
test: prereqs-test venv
	@rm -rf $(CI_LOGS); echo "make test: $(words $(TEST_STAGES)) stages in 3 lanes, whole output of each in $(CI_LOGS)/<stage>.log"
	@start=$$(date +%s); export CI_LOGS=$(CI_LOGS); \
	  bash tests/ci/stage.sh setup $(MAKE) --no-print-directory setup && \
	  MAKE=$(MAKE) bash tests/ci/lanes.sh --pool "$(LANE_POOL)" "$(LANE_FLEET)" "$(LANE_PAIR)" "$(LANE_VM)"; rc=$$?; \
	  if [ $$rc = 0 ]; then echo "make test: all $(words $(TEST_STAGES)) stages passed in $$(( $$(date +%s) - start )) s"; \
	  else echo "make test: FAILED after $$(( $$(date +%s) - start )) s"; fi; exit $$rc

# What the lanes share, made once before they start: the newest ansible-core's venv, the node image (and the labs'
# SSH key), the SIMULATOR archive. The VM lab's base image is the VM lane's first stage (vmlab-image) instead: its
# debootstrap keeps one core busy for about 75 s, and before the lanes the other core would wait.
setup: prereqs-lab venv $(NEWEST_VENV)/.installed
	bash lab/lab.sh image
	$(MAKE) --no-print-directory $(SIM_TAR)

# The VM lab's base image (debootstrap on the host; nothing to do when it is current).
.PHONY: vmlab-image
vmlab-image: prereqs-lab
	bash lab/vm/vmlab.sh build

# The router on the fleet lab (tests/fleet/test_router.py, about 10-15 min on 2 cores): needs `make lab-fleet`
# and site.yml on it; skipped when the fleet lab is not up, unless DSPARK_LAB_REQUIRED=1.
.PHONY: routertest
routertest: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -v -s -p no:cacheprovider tests/fleet/test_router.py

# The supervisor (dspark-fleet watch) on the fleet lab (tests/fleet/test_supervisor.py): needs `make lab-fleet` and
# site.yml on it, and the lab to itself; skipped when the fleet lab is not up, unless DSPARK_LAB_REQUIRED=1.
.PHONY: supervisortest
supervisortest: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -v -s -p no:cacheprovider tests/fleet/test_supervisor.py

# The support bundle on the fleet lab (tests/fleet/test_bundle.py): needs `make lab-fleet` and site.yml on it; it kills
# a rank and serves its group again.
.PHONY: bundletest
bundletest: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -v -s -p no:cacheprovider tests/fleet/test_bundle.py

# The fleet-lab suites (fleet driver, router, supervisor) on ONE fleet lab brought up here and taken down
# afterwards, in file order: test_fleet.py converges the fleet with dspark-fleet, test_router.py sets up the
# router and rolls every group through it, test_supervisor.py breaks groups. One suite: FLEET_SUITES=tests/fleet/test_router.py
# test_bundle.py kills a rank and serves its group again, after the router's suites and before the supervisor's (which
# start by serving a broken group again), so that the suites before it never meet a rank it killed.
# test_router_failover.py moves the service address between the two routers and leaves it on spark-router.
FLEET_SUITES ?= tests/fleet/test_fleet.py tests/fleet/test_monitoring.py tests/fleet/test_router.py \
  tests/fleet/test_router_failover.py tests/fleet/test_serve_edge.py tests/fleet/test_bundle.py tests/fleet/test_supervisor.py \
  tests/fleet/test_supervisor_service.py
.PHONY: fleettest
fleettest: prereqs-lab venv
	$(MAKE) --no-print-directory lab-fleet
	DSPARK_LAB_REQUIRED=1 DSPARK_LAB_INVENTORY=$(LAB_FLEET) $(BIN)/pytest -q -p no:cacheprovider tests/lab/test_lab.py -k "$(LAB_MULTI_TESTS)" && \
	  DSPARK_LAB_REQUIRED=1 PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -v -p no:cacheprovider $(FLEET_SUITES); \
	  rc=$$?; bash lab/lab.sh down -i $(LAB_FLEET); exit $$rc
