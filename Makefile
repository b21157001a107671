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
