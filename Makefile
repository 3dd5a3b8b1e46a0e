# Entry points: `make lab site` (a simulated DGX Spark pair, provisioned) and `make test` (everything CI runs).
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
SCENARIOS := $(sort $(notdir $(patsubst %/,%,$(dir $(wildcard molecule/*/molecule.yml)))))

.PHONY: venv lab lab-down lab-fleet lab-fleet-down site lint sanity unit labtest vmlabtest molecule test build bench

venv: $(VENV)/.installed
$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	touch $@

# The lab pair, the SIMULATOR image archive the lab inventory distributes, and a FAKE checkpoint on the worker.
lab: venv
	bash lab/lab.sh up
	bash lab/simulator/build.sh
	mkdir -p .lab/images
	docker save -o .lab/images/vllm-sim.tar dspark-lab/vllm-sim:latest
	$(BIN)/ansible-playbook -i inventories/lab/hosts.yml lab/seed_checkpoint.yml

lab-down:
	bash lab/lab.sh down

# The SIMULATED fleet (three serving groups, seven nodes) of inventories/lab-fleet, beside the pair; the
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

$(SIM_TAR): lab/simulator/Dockerfile lab/simulator/build.sh lab/simulator/dspark_vllm_sim.py
	bash lab/simulator/build.sh
	mkdir -p $(@D)
	docker save -o $@.tmp dspark-lab/vllm-sim:latest
	mv $@.tmp $@

site: venv
	$(BIN)/ansible-playbook -i inventories/lab/hosts.yml site.yml

lint: venv
	$(BIN)/yamllint -s .
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint -q --profile production
	$(BIN)/python tests/ci/check_argument_specs.py

sanity: venv
	VENV=$(CURDIR)/$(VENV) bash tests/ci/sanity.sh

unit: venv
	$(BIN)/pytest -q tests/unit

# The lab's own checks (SSH, fabric, DF ping); the lab is taken down afterwards.
labtest: venv
	bash lab/lab.sh up
	DSPARK_LAB_REQUIRED=1 $(BIN)/pytest -q tests/lab; rc=$$?; bash lab/lab.sh down; exit $$rc

# The VM lab's own checks (boot ~80 s under emulation); not part of `make test`: the vmlab scenario boots it.
vmlabtest: venv
	bash lab/vm/vmlab.sh build
	bash lab/vm/vmlab.sh up
	DSPARK_VMLAB_REQUIRED=1 $(BIN)/pytest -q tests/vmlab; rc=$$?; bash lab/vm/vmlab.sh down; exit $$rc

build: venv
	$(BIN)/ansible-galaxy collection build --force --output-path $(VENV)/build .

molecule: venv
	@for s in $(SCENARIOS); do \
	  echo "== molecule test -s $$s"; \
	  PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/molecule test -s $$s || exit 1; \
	done

bench: venv
	PATH=$(CURDIR)/$(BIN):$$PATH bash bench/run.sh

test: lint unit sanity build labtest molecule
