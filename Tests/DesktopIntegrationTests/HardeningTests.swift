import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The exposure `systemd-analyze security --offline=true --user` gave the
/// installed broker unit when its hardening was last reviewed (systemd 252,
/// docs/desktop.md, "Hardening"). Lower is better; a change that raises it
/// must say why there.
let measuredBrokerExposure = 6.2

/// Whether this systemd-analyze can judge a unit file without a running
/// manager (`security --offline=`, systemd 252 and later).
let offlineSecurityAnalysisAvailable: Bool = {
    guard let help = try? runTool(["systemd-analyze", "--help"]) else { return false }
    return help.status == 0 && help.output.contains("--offline")
}()

/// Whether this process may create a user namespace with its own user mapped
/// to itself, as a user manager does for `PrivateUsers=yes`.
let userNamespacesAvailable: Bool = {
    guard let probe = try? runTool(["unshare", "-U", "--map-user=\(getuid())", "--map-group=\(getgid())", "true"])
    else { return false }
    return probe.status == 0
}()

/// Settings a user manager can apply only in a user namespace of the
/// service's own: `PrivateUsers=yes` itself, and those systemd releases after
/// 252 turn it on for implicitly (systemd pull request 25233).
let settingsThatNeedAUserNamespace = [
    "PrivateUsers", "PrivateTmp", "PrivateDevices", "PrivateNetwork", "PrivateIPC", "PrivateMounts", "MountAPIVFS",
    "ProtectSystem", "ProtectHome", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
    "ProtectControlGroups", "ProtectClock", "ProtectHostname", "ProtectProc", "ProcSubset", "ReadWritePaths",
    "ReadOnlyPaths", "InaccessiblePaths", "ExecPaths", "NoExecPaths", "TemporaryFileSystem", "BindPaths",
    "BindReadOnlyPaths", "RootDirectory", "RootImage", "NetworkNamespacePath", "IPCNamespacePath",
    // Not a namespace, but it keeps the broker from the /proc entries of peers holding capabilities.
    "CapabilityBoundingSet",
]

@Suite("The broker unit's hardening", .dedicatedThread)
struct HardeningTests {
    @Test(.enabled(if: offlineSecurityAnalysisAvailable, "systemd-analyze has no --offline mode here"))
    func theInstalledUnitScoresNoWorseThanTheMeasuredExposure() throws {
        let prefix = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: prefix) }
        let make = try runTool(
            ["make", "-s", "install", "PREFIX=\(prefix)", "BINDIR_SRC=\(binDirectory)"], directory: repositoryRoot)
        try #require(make.status == 0, "\(make.output)")
        // The analysis needs a runtime directory to stand for %t.
        try FileManager.default.createDirectory(atPath: prefix + "/run", withIntermediateDirectories: true)
        chmod(prefix + "/run", 0o700)
        let analysis = try runTool(
            [
                "systemd-analyze", "security", "--offline=true", "--user", "--no-pager",
                prefix + "/lib/systemd/user/browser-login-broker.service",
            ], environment: ["XDG_RUNTIME_DIR": prefix + "/run"])
        let marker = "Overall exposure level for browser-login-broker.service: "
        let line = try #require(
            analysis.output.split(separator: "\n").first { $0.contains(marker) }, "\(analysis.output.suffix(2000))")
        let value = line.components(separatedBy: marker)[1].split(separator: " ").first.flatMap { Double($0) }
        let exposure = try #require(value, "\(line)")
        #expect(exposure <= measuredBrokerExposure, "exposure \(exposure): \(analysis.output.suffix(3000))")
        // The settings a user manager does enforce are all in force.
        for setting in [
            "NoNewPrivileges=", "SystemCallFilter=~@privileged", "SystemCallFilter=~@mount",
            "SystemCallArchitectures=", "MemoryDenyWriteExecute=", "LockPersonality=", "RestrictRealtime=",
            "RestrictSUIDSGID=", "RestrictNamespaces=~user", "RestrictAddressFamilies=~AF_PACKET",
            "RestrictAddressFamilies=~AF_NETLINK", "KeyringMode=",
        ] {
            let row = analysis.output.split(separator: "\n").first { $0.dropFirst(2).hasPrefix(setting) }
            #expect(row?.hasPrefix("✓") == true, "\(setting): \(row ?? "missing")")
        }
    }

    @Test func theUnitSetsNothingThatPutsTheBrokerInAUserNamespace() throws {
        let service = try String(
            contentsOfFile: repositoryRoot + "/systemd/browser-login-broker.service", encoding: .utf8)
        let keys = service.split(separator: "\n").filter { !$0.hasPrefix("#") }.compactMap {
            $0.split(separator: "=", maxSplits: 1).first.map(String.init)
        }
        for key in settingsThatNeedAUserNamespace { #expect(!keys.contains(key), "\(key)= would break Peers=") }
        for line in ["NoNewPrivileges=yes", "SystemCallFilter=@system-service", "MemoryDenyWriteExecute=yes"] {
            #expect(service.contains(line + "\n"), "\(line)")
        }
    }

    /// Why the unit has no namespace settings: Peers= reads a client's
    /// `/proc/PID/exe` and `/proc/PID/root`, and the kernel lets a process in
    /// a user namespace read neither for a process of the same user outside it.
    @Test(.enabled(if: userNamespacesAvailable, "user namespaces cannot be created here"))
    func aUserNamespaceHidesAPeersExecutable() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let peer = try SpawnedProcess(
            ["/usr/bin/sleep", "60"], environment: ProcessInfo.processInfo.environment, log: dir + "/log")
        defer { _ = peer.stop() }
        let path = "/proc/\(peer.pid)/exe"
        let outside = try runTool(["readlink", path])
        #expect(outside.status == 0 && outside.output.hasPrefix("/usr/bin/sleep"), "\(outside.output)")
        let inside = try runTool([
            "unshare", "-U", "--map-user=\(getuid())", "--map-group=\(getgid())", "readlink", path,
        ])
        #expect(inside.status != 0, "\(inside.output)")
        let root = try runTool([
            "unshare", "-U", "--map-user=\(getuid())", "--map-group=\(getgid())", "ls", "/proc/\(peer.pid)/root/",
        ])
        #expect(root.status != 0, "\(root.output)")
    }
}

/// Whether a user manager can be run here by `theRealUnitsServeUnderAUserManager`:
/// it needs root (a private mount namespace where `/run/systemd/system` exists,
/// so `systemd --user` believes the machine booted with systemd, and a cgroup
/// of its own) and a systemd binary.
let userManagerAvailable: Bool =
    getuid() == 0 && access("/lib/systemd/systemd", X_OK) == 0
    && ProcessInfo.processInfo.environment["DBUS_SESSION_BUS_ADDRESS"] != nil

/// Starts a real `systemd --user` with the shipped units (the broker's path
/// filled in), in a private mount namespace; the session bus and Secret
/// Service are the test run's. Prints `key=value` findings for the test.
private let userManagerScript = #"""
    set -u
    W=$1; BIN=$2; UNITS=$3
    mount -t tmpfs tmpfs /run/systemd && mkdir -p /run/systemd/system || { echo "fail=no /run/systemd"; exit 0; }
    # The manager gets a cgroup of its own in every writable hierarchy (it
    # moves the processes of its cgroup into an init.scope below it: they
    # must be only this script's), and each is left as it was found.
    CGS=""
    for h in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified /sys/fs/cgroup; do
      case "$(stat -f -c %T $h 2>/dev/null)" in
        cgroupfs) path=$(sed -n 's/^[0-9]*:name=systemd://p' /proc/self/cgroup) ;;
        cgroup2fs) path=$(sed -n 's/^0:://p' /proc/self/cgroup) ;;
        *) continue ;;
      esac
      own=$h${path%/}/bl-hardening-$$
      mkdir "$own" 2>/dev/null && echo $$ > "$own/cgroup.procs" && CGS="$CGS $h${path%/}:$own" \
        || { echo "fail=no cgroup of its own in $h"; exit 0; }
    done
    H=$W/home; U=$H/.config/systemd/user; C=$H/.config/browser-login/clients.d
    mkdir -p $U $C $W/run; chmod 700 $W/run
    sed "s|@bindir@|$BIN|" $UNITS/browser-login-broker.service > $U/browser-login-broker.service
    cp $UNITS/browser-login-broker.socket $U/
    mkdir -p $U/browser-login-broker.service.d
    printf '[Service]\nStandardOutput=append:%s/broker.log\nStandardError=append:%s/broker.log\n' $W $W \
      > $U/browser-login-broker.service.d/log.conf
    printf '[Unit]\nDescription=empty start target\n' > $U/empty.target
    # The test run's bus is the session bus: dbus.socket and dbus.service stand
    # in for it (the manager joins the bus once both are active) and start none.
    printf '[Socket]\nListenStream=%%t/unused-bus\n' > $U/dbus.socket
    printf '[Service]\nExecStart=/usr/bin/sleep infinity\n' > $U/dbus.service
    # "The browser": says which cgroup it ran in, never the address.
    printf '#!/bin/sh\necho "opener=$(tail -1 /proc/self/cgroup)" >> %s/opened\n' $W > $W/opener; chmod +x $W/opener
    a=${DBUS_SESSION_BUS_ADDRESS#unix:path=}; ln -s "${a%%,*}" $W/run/bus
    mkdir -p $W/server
    printf '{"clients":[{"clientId":"com.example.notes","appName":"Example Notes","returnUrls":["com.example.notes:/callback"],"policy":"confirm"}],"testAccounts":["t@example.org"]}' > $W/server/server.json
    $BIN/browser-login-server serve --config $W/server/server.json --listen 127.0.0.1 --port 0 \
      --database $W/server/db.sqlite --outbox $W/server/outbox --ready-file $W/server/ready > $W/server.log 2>&1 &
    S=$!
    for i in $(seq 100); do [ -s $W/server/ready ] && break; sleep 0.1; done
    printf '[Client]\nId=com.example.notes\nAppName=Example Notes\nServer=%s\nReturnUrl=com.example.notes:/callback\n' \
      "$(cat $W/server/ready)" > $C/notes.conf
    # A standard-provider client with a loopback redirect: RFC 8414 metadata
    # from a stand-in provider (the sign-in goes no further than the browser).
    cat > $W/provider.py <<'PY'
    import http.server, json, sys
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            issuer = "http://127.0.0.1:%d" % self.server.server_address[1]
            body = json.dumps({"issuer": issuer, "authorization_endpoint": issuer + "/authorize",
                "token_endpoint": issuer + "/token", "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"]}).encode()
            self.send_response(200 if self.path.startswith("/.well-known/") else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args): pass
    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    open(sys.argv[1], "w").write(str(server.server_address[1]))
    server.serve_forever()
    PY
    python3 $W/provider.py $W/provider.port & PP=$!
    for i in $(seq 100); do [ -s $W/provider.port ] && break; sleep 0.1; done
    printf '[Client]\nId=org.example.loopback\nAppName=Loopback\nProtocol=oauth2\nIssuer=http://127.0.0.1:%s\n' \
      "$(cat $W/provider.port)" > $C/loopback.conf
    printf 'ClientId=loopback\nReturnUrl=http://127.0.0.1/callback\nApiOrigin=https://api.example.org\n' >> $C/loopback.conf
    for c in bound:$BIN/browser-login refused:/usr/bin/not-this-program open:; do
      n=${c%%:*}; p=${c#*:}
      printf '[Client]\nId=org.example.%s\nAppName=Example %s\nProtocol=oauth2\nIssuer=https://login.example.org\n' $n $n > $C/$n.conf
      printf 'ClientId=example\nAuthorizationEndpoint=https://login.example.org/a\nTokenEndpoint=https://login.example.org/t\n' >> $C/$n.conf
      printf 'ReturnUrl=http://127.0.0.1/callback\nApiOrigin=https://api.example.org\n' >> $C/$n.conf
      [ -n "$p" ] && echo "Peers=$p" >> $C/$n.conf
    done
    export HOME=$H XDG_CONFIG_HOME=$H/.config XDG_STATE_HOME=$H/.local/state XDG_RUNTIME_DIR=$W/run
    /lib/systemd/systemd --user --unit=empty.target > $W/manager.log 2>&1 &
    M=$!
    for i in $(seq 100); do [ -S $W/run/systemd/private ] && break; sleep 0.1; done
    systemctl --user start dbus.socket dbus.service
    for i in $(seq 50); do busctl --user status org.freedesktop.systemd1 >/dev/null 2>&1 && break; sleep 0.1; done
    systemctl --user set-environment BROWSER="$W/opener %s"
    systemctl --user start browser-login-broker.socket && echo socket=started
    $BIN/browser-login start com.example.notes >/dev/null && echo start=ok
    for i in $(seq 50); do [ -s $W/opened ] && break; sleep 0.1; done
    $BIN/browser-login start org.example.loopback >/dev/null && echo loopbackStart=ok
    MP=$(systemctl --user show -p MainPID --value browser-login-broker.service)
    # The broker's listening TCP sockets on 127.0.0.1 (its redirect listener).
    own=" $(ls -l /proc/$MP/fd | sed -n 's/.*socket:\[\([0-9]*\)\]$/\1/p' | tr '\n' ' ')"
    for inode in $(awk '$4 == "0A" && $2 ~ /^0100007F:/ {print $10}' /proc/net/tcp); do
      case "$own" in *" $inode "*) echo loopbackListener=yes ;; esac
    done
    for i in $(seq 50); do [ "$(grep -c opener= $W/opened)" -ge 2 ] && break; sleep 0.1; done
    cat $W/opened
    echo "clients=$($BIN/browser-login clients 2>&1 | awk 'NR>1 {print $1}' | sort | tr '\n' ' ')"
    cp $BIN/browser-login $W/other-cli
    echo "otherClients=$($W/other-cli clients 2>&1 | awk 'NR>1 {print $1}' | sort | tr '\n' ' ')"
    echo "active=$(systemctl --user is-active browser-login-broker.service)"
    MP=$(systemctl --user show -p MainPID --value browser-login-broker.service)
    echo "noNewPrivs=$(awk '/^NoNewPrivs/ {print $2}' /proc/$MP/status)"
    echo "seccomp=$(awk '/^Seccomp:/ {print $2}' /proc/$MP/status)"
    echo "stateDirectory=$(tr '\0' '\n' < /proc/$MP/environ | sed -n 's/^STATE_DIRECTORY=//p')"
    for name in org.browserlogin.Broker org.browserlogin.Broker1; do
      gdbus call --session --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus \
        --method org.freedesktop.DBus.NameHasOwner $name | grep -q true && echo "busName=$name"
    done
    systemctl --user stop browser-login-broker.service browser-login-broker.socket
    kill $S $PP $M; wait $S $PP $M
    for entry in $CGS; do
      echo $$ > "${entry%%:*}/cgroup.procs"
      find "${entry#*:}" -depth -type d -exec rmdir {} \; || echo "fail=cgroup ${entry#*:} left"
    done
    echo done=yes
    """#

extension HardeningTests {
    /// The proof that the hardening does not break the broker: the shipped
    /// units under a real user manager, socket-activated; the broker answers,
    /// reads the client files, keeps its state, owns its bus names, starts
    /// sign-ins (the servers over TCP, a loopback redirect listener, the
    /// browser through systemd-run --user) and applies Peers=, with no_new_privs and a
    /// seccomp filter in force.
    @Test(.enabled(if: userManagerAvailable, "needs root, /lib/systemd/systemd and a session bus to run systemd --user"))
    func theRealUnitsServeUnderAUserManager() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let script = dir + "/user-manager.sh"
        try Data(userManagerScript.utf8).write(to: URL(fileURLWithPath: script))
        let bin = URL(fileURLWithPath: binDirectory).resolvingSymlinksInPath().path
        let run = try runTool(
            ["unshare", "-m", "--propagation", "private", "bash", script, dir, bin, repositoryRoot + "/systemd"])
        var found: [String: [String]] = [:]
        for line in run.output.split(separator: "\n") {
            guard let eq = line.firstIndex(of: "=") else { continue }
            found[String(line[..<eq]), default: []].append(String(line[line.index(after: eq)...]))
        }
        let log = (try? String(contentsOfFile: dir + "/broker.log", encoding: .utf8)) ?? ""
        let context = "\(run.output)\nbroker log:\n\(log)"
        #expect(found["socket"] == ["started"], "\(context)")
        // login.start: the server reached over TCP, the browser opened by
        // the user manager in a transient unit of its own (systemd-run --user).
        #expect(found["start"] == ["ok"], "\(context)")
        #expect(found["loopbackStart"] == ["ok"], "\(context)")
        #expect(found["loopbackListener"] == ["yes"], "\(context)")
        let openers = found["opener"] ?? []
        #expect(openers.count == 2, "\(context)")
        for opener in openers {
            #expect(opener.contains("/app.slice/run-") && opener.hasSuffix(".service"), "\(context)")
        }
        #expect(found["active"] == ["active"], "\(context)")
        // Peers=: the CLI's own path is named by "bound"; a copy elsewhere is not.
        #expect(found["clients"] == ["com.example.notes org.example.bound org.example.loopback org.example.open "], "\(context)")
        #expect(found["otherClients"] == ["com.example.notes org.example.loopback org.example.open "], "\(context)")
        #expect(found["noNewPrivs"] == ["1"], "\(context)")
        #expect(found["seccomp"] == ["2"], "\(context)")
        let state = try #require(found["stateDirectory"]?.first, "\(context)")
        #expect(FileManager.default.fileExists(atPath: state + "/state.sqlite"), "\(context)")
        #expect(found["busName"] == ["org.browserlogin.Broker", "org.browserlogin.Broker1"], "\(context)")
        #expect(found["done"] == ["yes"], "\(context)")
        #expect(found["fail"] == nil, "\(context)")
    }
}
