import Foundation
import SystemSupport
import Testing

@Suite("Paths, /proc, subprocesses")
struct SystemTests {
    @Test func xdgDirectoriesTakeTheirDefaultsWhenUnsetOrEmpty() {
        let paths = UserPaths(environment: ["HOME": "/home/u", "XDG_CONFIG_HOME": "", "XDG_DATA_DIRS": "/a:/b"])
        #expect(paths.configHome == "/home/u/.config")
        #expect(paths.dataHome == "/home/u/.local/share")
        #expect(paths.stateHome == "/home/u/.local/state")
        #expect(paths.brokerStateDirectory == "/home/u/.local/state/browser-login")
        #expect(
            paths.clientDirectories == [
                "/home/u/.config/browser-login/clients.d", "/a/browser-login/clients.d", "/b/browser-login/clients.d",
            ])
        #expect(paths.applicationsDirectory == "/home/u/.local/share/applications")
        #expect(paths.mimeAppsList == "/home/u/.config/mimeapps.list")
        #expect(UserPaths(environment: ["HOME": "/h", "STATE_DIRECTORY": "/var/s"]).brokerStateDirectory == "/var/s")
    }

    /// docs/rpc.md, Connecting: the daemon, the CLI and the URL handler agree.
    @Test func theSocketIsTheOptionThenTheVariableThenTheRuntimeDirectory() {
        let both = UserPaths(environment: ["BROWSER_LOGIN_SOCKET": "/tmp/b.sock", "XDG_RUNTIME_DIR": "/run/user/1"])
        #expect(both.brokerSocket(option: "/x.sock") == "/x.sock")
        #expect(both.brokerSocket() == "/tmp/b.sock")
        let runtime = UserPaths(environment: ["BROWSER_LOGIN_SOCKET": "", "XDG_RUNTIME_DIR": "/run/user/1"])
        #expect(runtime.brokerSocket() == "/run/user/1/browser-login/broker.sock")
        #expect(UserPaths(environment: [:]).brokerSocket() == nil)
    }

    @Test func procReadsThisProcess() {
        #expect((ProcFS.residentKiB() ?? 0) > 0)
        #expect((ProcFS.statusNumber("voluntary_ctxt_switches") ?? -1) >= 0)
        #expect(ProcFS.executable()?.hasPrefix("/") == true)
        #expect(ProcFS.isAlive(pid: getpid()))
        #expect((ProcFS.openDescriptorCount() ?? 0) >= 3)
        #expect(ProcFS.cpuSeconds() != nil)
        #expect(ProcFS.statusField("Name", pid: 999_999_999) == nil)
    }

    @Test func contextSwitchesAreReadForEachThreadByName() {
        let before = ProcFS.contextSwitches()
        // The main thread's id is the process id; a sleep switches this thread out at least once.
        usleep(2_000)
        // This thread's id: /proc/thread-self is a link to PID/task/TID.
        let mine = Int32(FileSystem.symbolicLinkTarget("/proc/thread-self")?.split(separator: "/").last ?? "") ?? -1
        let after = ProcFS.contextSwitches()
        #expect(after[getpid()] != nil)
        #expect(after[mine].map { !$0.name.isEmpty && $0.name != "?" } == true)
        #expect((after[mine]?.count ?? 0) > (before[mine]?.count ?? .max))
        #expect(ProcFS.contextSwitches(pid: 999_999_999).isEmpty)
    }

    @Test func aSubprocessRunsWithItsOutputCapturedAndStatusReported() {
        let env = ["PATH": "/usr/bin:/bin", "GREETING": "hi there"]
        let sh = Subprocess.findProgram("sh", environment: env)
        #expect(sh != nil)
        let result = Subprocess.run(
            program: sh!, arguments: ["-c", "echo \"$GREETING\"; echo err >&2; exit 3"], environment: env)
        #expect(result.status == 3)
        #expect(result.output == "hi there\n")
        #expect(Subprocess.run(program: "/nonexistent/program", arguments: [], environment: env).status == 127)
        #expect(Subprocess.findProgram("no-such-program-here", environment: env) == nil)
    }

    @Test func aChildDoesNotInheritIgnoredSignalsOrDescriptors() throws {
        signal(SIGUSR2, SIG_IGN)
        defer { signal(SIGUSR2, SIG_DFL) }
        let fd = open("/dev/null", O_RDONLY)
        defer { close(fd) }
        let result = Subprocess.run(
            program: "/bin/sh", arguments: ["-c", "grep SigIgn /proc/self/status; ls /proc/self/fd"], environment: [:])
        let ignored = result.output.split(separator: "\n").first.map { $0.split(separator: "\t").last ?? "" } ?? ""
        #expect(UInt64(ignored, radix: 16).map { $0 & (1 << (UInt64(SIGUSR2) - 1)) } == 0)
        #expect(!result.output.split(separator: "\n").contains(Substring("\(fd)")))
    }
}
