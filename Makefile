# browser-login — common tasks. `make test` is the README's test command.
PREFIX ?= /usr/local
DESTDIR ?=
SWIFT ?= swift
BINDIR = $(PREFIX)/bin
# The broker's HTTP helper (browser-login-http) lives here; the broker looks in ../libexec/browser-login.
LIBEXECDIR = $(PREFIX)/libexec
DATADIR = $(PREFIX)/share
# Where the binaries to install come from; set it to skip the release build.
BINDIR_SRC ?=

# The system unit of browser-login-server; Debian 12 keeps system units in /lib.
SYSTEMUNITDIR ?= $(PREFIX)/lib/systemd/system
# The one place the version is written; Tests/DesktopIntegrationTests/VersionTests.swift
# checks that the programs' constants and packaging/deb/changelog agree with it.
VERSION := $(shell cat VERSION)

PROGRAMS = browser-login browser-login-broker browser-login-http browser-login-server
SUBST = sed -e 's|@bindir@|$(BINDIR)|g'
# Release builds carry the Swift runtime and Foundation inside the binaries, so
# they run on a machine without Swift; no run path at all (not even $ORIGIN).
# Product by product: the toolchain has no static swift-testing, which the
# test-only targets (and the benchmarks, built by `make bench`) import.
# -z relro -z now: the whole GOT read-only after start-up (Debian's hardening).
# lld with packaging/broker.order: the functions the daemon runs are placed first and together in
# .text, so it keeps fewer pages of its code resident (scripts/order-file, docs/performance.md);
# each Swift function in a section of its own (-function-sections), without which lld can only move
# a module's whole .text and the list orders little (a changed flag needs a clean release build:
# SwiftPM keeps the objects it has);
# relative relocations packed (DT_RELR, glibc 2.36), and no symbol exported from the programs (none
# is looked up in them): start-up reads 1 MiB less of each binary.
RELEASE_FLAGS = -c release --static-swift-stdlib --disable-local-rpath \
  -Xlinker -z -Xlinker relro -Xlinker -z -Xlinker now \
  -Xswiftc -Xfrontend -Xswiftc -function-sections \
  -Xswiftc -use-ld=lld -Xlinker --symbol-ordering-file=$(CURDIR)/packaging/broker.order \
  -Xlinker --no-warn-symbol-ordering \
  -Xlinker -z -Xlinker pack-relative-relocs -Xlinker --no-export-dynamic \
  -Xswiftc -L$(STATIC_CXX)
# libstdc++ linked statically (the GCC Runtime Library Exception allows it): the Swift runtime needs a
# few of its functions, but the shared library kept about 1 MiB of the daemon resident, its symbol
# tables read for every relocation made against it at start-up. The Swift runtime's link arguments
# ask for -lstdc++; a directory holding only the archive, searched before the compiler's own (which
# has the shared library), makes that the archive.
STATIC_CXX = $(CURDIR)/.build/static-libstdc++
# Builds the products $(1) in release, the libstdc++ archive linked first.
release-build = a=$$(gcc -print-file-name=libstdc++.a) && [ -f "$$a" ] \
  || { echo "make: libstdc++.a not found (apt-get install libstdc++-12-dev)" >&2; exit 1; }; \
  mkdir -p $(STATIC_CXX) && ln -sfn "$$a" $(STATIC_CXX)/libstdc++.a \
  && for p in $(1); do $(SWIFT) build $(RELEASE_FLAGS) --product $$p || exit 1; done

.PHONY: build test sanitize demo demo-provider e2e-browser clean install install-client install-server uninstall deb

build:
	scripts/install-deps
	$(call release-build,$(PROGRAMS))

test:
	scripts/install-deps
	scripts/test
	@# The reference server's suite again, on PostgreSQL (scripts/postgres); skipped, saying so, where it is not installed.
	if scripts/postgres check 2>/dev/null || [ -n "$$BL_REQUIRE_POSTGRES" ]; then \
	  BL_TEST_STORE=postgres scripts/test --filter LoginServerTests; \
	else echo "make test: PostgreSQL is not installed (scripts/install-deps): the server suite ran on SQLite only"; fi

# The unit and end-to-end suites under ThreadSanitizer, then AddressSanitizer:
# separate build directories; the end-to-end tests run the sanitized daemon,
# server and CLI of the same build. Suppressions: scripts/sanitizers/.
sanitize:
	scripts/install-deps
	scripts/sanitize

demo:
	scripts/demo

e2e-browser:
	scripts/demo --real-browser
	# Passkeys in the same browser: a WebAuthn virtual authenticator on the hosted page (docs/server.md).
	BL_REQUIRE_BROWSER=1 scripts/test --filter PasskeyBrowserTests

# The same API over a standard OpenID provider (django-oauth-toolkit from PyPI):
# a loopback-redirect sign-in and a device sign-in (docs/providers.md).
demo-provider:
	scripts/demo-provider

# `install` = `install-client` (the broker, the CLI and their desktop files) +
# `install-server` (the reference login server); the Debian packages split the same way.
install: install-client install-server

# The release binaries, built once; BINDIR_SRC=DIR skips the build.
release-binaries:
	@if [ -z "$(BINDIR_SRC)" ]; then $(MAKE) build; fi
.PHONY: release-binaries
SRC = $(if $(BINDIR_SRC),$(BINDIR_SRC),$(shell $(SWIFT) build $(RELEASE_FLAGS) --show-bin-path))

install-client: release-binaries
	install -d $(DESTDIR)$(BINDIR)
	for p in browser-login browser-login-broker; do install -m 0755 $(SRC)/$$p $(DESTDIR)$(BINDIR)/$$p; done
	install -d $(DESTDIR)$(LIBEXECDIR)/browser-login
	install -m 0755 $(SRC)/browser-login-http $(DESTDIR)$(LIBEXECDIR)/browser-login/browser-login-http
	install -d $(DESTDIR)$(PREFIX)/lib/systemd/user
	for u in systemd/browser-login-broker.service systemd/browser-login-broker.socket; do \
	  $(SUBST) $$u > $(DESTDIR)$(PREFIX)/lib/systemd/user/$$(basename $$u); \
	  chmod 0644 $(DESTDIR)$(PREFIX)/lib/systemd/user/$$(basename $$u); done
	install -d $(DESTDIR)$(DATADIR)/dbus-1/services $(DESTDIR)$(DATADIR)/dbus-1/interfaces
	$(SUBST) dbus/org.browserlogin.Broker.service.in > $(DESTDIR)$(DATADIR)/dbus-1/services/org.browserlogin.Broker.service
	chmod 0644 $(DESTDIR)$(DATADIR)/dbus-1/services/org.browserlogin.Broker.service
	install -m 0644 dbus/org.freedesktop.Application.xml \
	  $(DESTDIR)$(DATADIR)/dbus-1/interfaces/org.browserlogin.Broker.org.freedesktop.Application.xml
	$(SUBST) dbus/org.browserlogin.Broker1.service.in > $(DESTDIR)$(DATADIR)/dbus-1/services/org.browserlogin.Broker1.service
	chmod 0644 $(DESTDIR)$(DATADIR)/dbus-1/services/org.browserlogin.Broker1.service
	install -m 0644 dbus/org.browserlogin.Broker1.xml $(DESTDIR)$(DATADIR)/dbus-1/interfaces/org.browserlogin.Broker1.xml
	install -d $(DESTDIR)$(DATADIR)/browser-login
	install -m 0644 dbus/org.browserlogin.Broker.desktop.in $(DESTDIR)$(DATADIR)/browser-login/
	install -d $(DESTDIR)$(DATADIR)/doc/browser-login
	install -m 0644 README.md docs/*.md $(DESTDIR)$(DATADIR)/doc/browser-login/
	install -d $(DESTDIR)$(DATADIR)/doc/browser-login/apps
	install -m 0644 docs/apps/*.md $(DESTDIR)$(DATADIR)/doc/browser-login/apps/
	install -d $(DESTDIR)$(DATADIR)/man/man1 $(DESTDIR)$(DATADIR)/man/man8
	install -m 0644 man/browser-login.1 $(DESTDIR)$(DATADIR)/man/man1/
	install -m 0644 man/browser-login-broker.8 $(DESTDIR)$(DATADIR)/man/man8/
	install -d $(DESTDIR)$(DATADIR)/bash-completion/completions $(DESTDIR)$(DATADIR)/zsh/vendor-completions \
	  $(DESTDIR)$(DATADIR)/fish/vendor_completions.d
	install -m 0644 completions/browser-login.bash $(DESTDIR)$(DATADIR)/bash-completion/completions/browser-login
	install -m 0644 completions/_browser-login $(DESTDIR)$(DATADIR)/zsh/vendor-completions/_browser-login
	install -m 0644 completions/browser-login.fish $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/browser-login.fish

install-server: release-binaries
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(DATADIR)/man/man1 $(DESTDIR)$(SYSTEMUNITDIR)
	install -m 0755 $(SRC)/browser-login-server $(DESTDIR)$(BINDIR)/browser-login-server
	install -m 0644 man/browser-login-server.1 $(DESTDIR)$(DATADIR)/man/man1/
	$(SUBST) systemd/browser-login-server.service > $(DESTDIR)$(SYSTEMUNITDIR)/browser-login-server.service
	chmod 0644 $(DESTDIR)$(SYSTEMUNITDIR)/browser-login-server.service
	install -d $(DESTDIR)$(DATADIR)/doc/browser-login-server/examples
	install -m 0644 docs/server.md $(DESTDIR)$(DATADIR)/doc/browser-login-server/
	install -m 0644 examples/server.json $(DESTDIR)$(DATADIR)/doc/browser-login-server/examples/

# The Debian packages browser-login_<version>_amd64.deb and
# browser-login-server_<version>_amd64.deb in DEBDIR (packaging/deb/build-deb).
DEBDIR ?= .build/deb
deb: release-binaries
	packaging/deb/build-deb "$(SRC)" "$(DEBDIR)"

uninstall:
	for p in $(PROGRAMS); do rm -f $(DESTDIR)$(BINDIR)/$$p; done
	rm -rf $(DESTDIR)$(LIBEXECDIR)/browser-login
	rm -f $(DESTDIR)$(PREFIX)/lib/systemd/user/browser-login-broker.service \
	  $(DESTDIR)$(PREFIX)/lib/systemd/user/browser-login-broker.socket \
	  $(DESTDIR)$(DATADIR)/dbus-1/services/org.browserlogin.Broker.service \
	  $(DESTDIR)$(DATADIR)/dbus-1/interfaces/org.browserlogin.Broker.org.freedesktop.Application.xml \
	  $(DESTDIR)$(DATADIR)/dbus-1/services/org.browserlogin.Broker1.service \
	  $(DESTDIR)$(DATADIR)/dbus-1/interfaces/org.browserlogin.Broker1.xml \
	  $(DESTDIR)$(DATADIR)/man/man1/browser-login.1 $(DESTDIR)$(DATADIR)/man/man1/browser-login-server.1 \
	  $(DESTDIR)$(DATADIR)/man/man8/browser-login-broker.8 \
	  $(DESTDIR)$(DATADIR)/bash-completion/completions/browser-login \
	  $(DESTDIR)$(DATADIR)/zsh/vendor-completions/_browser-login \
	  $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/browser-login.fish \
	  $(DESTDIR)$(SYSTEMUNITDIR)/browser-login-server.service
	rm -rf $(DESTDIR)$(DATADIR)/browser-login $(DESTDIR)$(DATADIR)/doc/browser-login \
	  $(DESTDIR)$(DATADIR)/doc/browser-login-server

clean:
	rm -rf .build

# Benchmarks (docs/performance.md): release build, then the suite under a
# headless keyring against the real server on loopback. `make soak MINUTES=10`.
MINUTES ?= 10
.PHONY: bench bench-stores soak
bench:
	scripts/install-deps
	$(call release-build,$(PROGRAMS) browser-login-bench)
	scripts/with-keyring .build/release/browser-login-bench $(BENCH_FLAGS)

# The reference server on SQLite and on 1, 2, 4 instances over one PostgreSQL (docs/server.md).
bench-stores:
	scripts/install-deps
	$(call release-build,$(PROGRAMS) browser-login-bench)
	.build/release/browser-login-bench --server-stores $(BENCH_FLAGS)

# Regenerates packaging/broker.order from a profiled run of the release daemon (valgrind; about 5 minutes).
.PHONY: order-file
order-file:
	scripts/install-deps
	$(call release-build,$(PROGRAMS) browser-login-bench)
	scripts/order-file

soak:
	scripts/install-deps
	$(call release-build,$(PROGRAMS) browser-login-bench)
	scripts/with-keyring .build/release/browser-login-bench --soak $(MINUTES)

# Fuzzing (docs/reliability.md): every libFuzzer target for FUZZ_SECONDS each
# (CI runs `scripts/fuzz`, 20 s each). `make fuzz FUZZ_SECONDS=60 FUZZ_TARGETS=callback`.
FUZZ_SECONDS ?= 300
FUZZ_TARGETS ?=
.PHONY: fuzz
fuzz:
	scripts/install-deps
	scripts/fuzz --seconds $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The reliability run (docs/reliability.md): crash points, load and abuse, and
# the outside-world fault suites, in about 10 minutes; its last line is
# "N passed, M failed". CI runs `scripts/stress --quick`.
.PHONY: stress
stress:
	scripts/install-deps
	scripts/stress
