# The two commands a newcomer runs (see README):
#   make demo   the whole story end to end on the local test bed
#   make test   every check and test (what CI runs)

CARGO ?= cargo

.PHONY: demo test deps lint build bench clean-bed

deps:
	./scripts/install-deps.sh

build:
	$(CARGO) build --locked

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

test: deps lint
	$(CARGO) test --locked --all-targets

demo: deps build
	./scripts/demo.sh

bench: deps
	$(CARGO) build --release --locked
	python3 scripts/bench.py all
