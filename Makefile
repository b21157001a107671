# browser-login — common tasks. `make test` is the README's test command.
PREFIX ?= /usr/local
SWIFT ?= swift

.PHONY: build test demo e2e-browser clean

build:
	scripts/install-deps
	$(SWIFT) build -c release

test:
	scripts/install-deps
	scripts/test

demo:
	scripts/demo

e2e-browser:
	scripts/demo --real-browser

clean:
	rm -rf .build
