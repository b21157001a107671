# browser-login — common tasks. `make test` is the README's test command.
PREFIX ?= /usr/local
SWIFT ?= swift

.PHONY: build test clean

build:
	scripts/install-deps
	$(SWIFT) build -c release

test:
	scripts/install-deps
	scripts/test

clean:
	rm -rf .build

# Benchmarks (docs/performance.md): release build, then the suite under a
# headless keyring against the real server on loopback. `make soak MINUTES=10`.
MINUTES ?= 10
.PHONY: bench soak
bench:
	scripts/install-deps
	$(SWIFT) build -c release
	scripts/with-keyring .build/release/browser-login-bench $(BENCH_FLAGS)

soak:
	scripts/install-deps
	$(SWIFT) build -c release
	scripts/with-keyring .build/release/browser-login-bench --soak $(MINUTES)
