import BrokerCore
import BrowserLoginTestSupport
import DesktopEntry
import Foundation
import Testing

@testable import Broker
@testable import Engine

/// The desktop facts the broker and `doctor` share (DesktopSetup): read from XDG directories a test
/// writes, with a PATH of its own — the default handler of a scheme, xdg-open's version, the default
/// browser's packaging, and the one reason a custom-scheme callback would not come back.
@Suite struct DesktopSetupTests {
    let dir: TemporaryDirectory
    var env: [String: String]

    init() throws {
        dir = try TemporaryDirectory("desk")
        env = [
            "HOME": dir.path, "XDG_CONFIG_HOME": dir.path + "/config", "XDG_CONFIG_DIRS": dir.path + "/etc-xdg",
            "XDG_DATA_HOME": dir.path + "/data-home", "XDG_DATA_DIRS": dir.path + "/data",
            "PATH": dir.path + "/bin:/usr/bin:/bin", "XDG_CURRENT_DESKTOP": "",
        ]
        for sub in ["config", "etc-xdg", "data-home/applications", "data/applications", "bin"] {
            try FileManager.default.createDirectory(atPath: dir.path + "/" + sub, withIntermediateDirectories: true)
        }
    }

    func write(_ relative: String, _ text: String, executable: Bool = false) throws {
        let path = dir.path + "/" + relative
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        if executable { chmod(path, 0o755) }
    }

    func application(_ id: String, exec: String, types: [String], extra: String = "", in place: String = "data-home")
        throws
    {
        try write(
            "\(place)/applications/\(id)",
            "[Desktop Entry]\nType=Application\nName=\(id)\nExec=\(exec)\n\(extra)MimeType="
                + types.map { "x-scheme-handler/\($0);" }.joined() + "\n")
    }

    func defaults(_ pairs: [(String, String)], file: String = "config/mimeapps.list") throws {
        try write(file, "[Default Applications]\n" + pairs.map { "x-scheme-handler/\($0.0)=\($0.1);\n" }.joined())
    }

    @Test func theDefaultHandlerComesFromMimeappsListAndSkipsAnUninstalledProgram() throws {
        let setup = DesktopSetup(environment: env)
        #expect(setup.defaultApplication(for: "x-scheme-handler/com.example.notes") == nil)
        #expect(!setup.brokerHandlesScheme("com.example.notes"))
        try application(DesktopEntry.fileName, exec: "/bin/true finish %u", types: ["com.example.notes"])
        // No default set: the one application that handles the type.
        #expect(setup.brokerHandlesScheme("com.example.notes"))
        try application("other.desktop", exec: "/bin/true %u", types: ["com.example.notes"])
        try defaults([("com.example.notes", "other.desktop")])
        #expect(setup.defaultApplication(for: "x-scheme-handler/com.example.notes") == "other.desktop")
        #expect(!setup.brokerHandlesScheme("com.example.notes"))
        // A default whose program is not installed is skipped, as xdg-mime skips it.
        try application("gone.desktop", exec: "not-installed-anywhere %u", types: ["com.example.notes"])
        try defaults([("com.example.notes", "gone.desktop;" + DesktopEntry.fileName)])
        #expect(setup.brokerHandlesScheme("com.example.notes"))
        // A desktop's own list comes first.
        try defaults([("com.example.notes", "other.desktop")], file: "config/gnome-mimeapps.list")
        var gnome = env
        gnome["XDG_CURRENT_DESKTOP"] = "GNOME"
        #expect(!DesktopSetup(environment: gnome).brokerHandlesScheme("com.example.notes"))
    }

    @Test func xdgOpensVersionIsReadFromItsScript() throws {
        #expect(DesktopSetup.isOldXdgOpen("1.1.3"))
        #expect(!DesktopSetup.isOldXdgOpen("1.2.1"))
        #expect(!DesktopSetup.isOldXdgOpen(nil))
        try write(
            "bin/xdg-open", "#!/bin/sh\ncase $1 in\n--version)\n    echo \"xdg-open 1.1.3\"\n    exit 0\n;;\nesac\n",
            executable: true)
        let setup = DesktopSetup(environment: env)
        #expect(setup.xdgOpenVersion() == "1.1.3")
        #expect(setup.xdgOpenMangles(scheme: "org.example.app2", version: "1.1.3"))
        #expect(!setup.xdgOpenMangles(scheme: "org.example.app", version: "1.1.3"))
        #expect(!setup.xdgOpenMangles(scheme: "org.example.app2", version: "1.2.1"))
        var gnome = env
        gnome["XDG_CURRENT_DESKTOP"] = "GNOME"
        #expect(!DesktopSetup(environment: gnome).xdgOpenMangles(scheme: "org.example.app2", version: "1.1.3"))
        // The system's own xdg-open answers as its script says.
        var system = env
        system["PATH"] = "/usr/bin:/bin"
        if let version = DesktopSetup(environment: system).xdgOpenVersion() {
            let answer = try runProgram("/usr/bin/xdg-open", ["--version"], environment: system)
            #expect(answer.out.trimmingCharacters(in: .whitespacesAndNewlines) == "xdg-open " + version)
        }
    }

    @Test func theDefaultBrowsersPackaging() throws {
        let setup = DesktopSetup(environment: env)
        #expect(setup.defaultBrowser() == nil)
        try application("firefox-esr.desktop", exec: "/bin/true %u", types: ["http", "https"])
        try defaults([("https", "firefox-esr.desktop")])
        #expect(setup.defaultBrowser()?.packaging == .host)

        try write("bin/flatpak", "#!/bin/sh\nexit 0\n", executable: true)
        try application(
            "org.mozilla.firefox.desktop",
            exec:
                "flatpak run --branch=stable --arch=x86_64 --command=firefox --file-forwarding org.mozilla.firefox @@u %u @@",
            types: ["https"])
        try defaults([("https", "org.mozilla.firefox.desktop")])
        let flatpak = try #require(setup.defaultBrowser())
        #expect(flatpak.packaging == .flatpak)
        #expect(flatpak.flatpakAppId == "org.mozilla.firefox")

        // Exported from a Flatpak installation's exports directory, with X-Flatpak naming the app.
        var exported = env
        exported["XDG_DATA_DIRS"] = dir.path + "/flatpak/exports/share:" + dir.path + "/data"
        try application(
            "org.chromium.Chromium.desktop", exec: "/bin/true %u", types: ["https"],
            extra: "X-Flatpak=org.chromium.Chromium\n", in: "flatpak/exports/share")
        try defaults([("https", "org.chromium.Chromium.desktop")])
        let chromium = try #require(DesktopSetup(environment: exported).defaultBrowser())
        #expect(chromium.packaging == .flatpak)
        #expect(chromium.flatpakAppId == "org.chromium.Chromium")

        try write("bin/snap-firefox", "#!/bin/sh\nexit 0\n", executable: true)
        try application(
            "firefox_firefox.desktop", exec: "env BAMF_DESKTOP_FILE_HINT=/x " + dir.path + "/bin/snap-firefox %u",
            types: ["https"], extra: "X-SnapInstanceName=firefox\n")
        try defaults([("https", "firefox_firefox.desktop")])
        #expect(setup.defaultBrowser()?.packaging == .snap)
    }

    @Test func theFirstReasonACallbackWouldNotComeBack() {
        let flatpak = DefaultBrowser(id: "f.desktop", path: nil, packaging: .flatpak, flatpakAppId: "org.f.F")
        let snap = DefaultBrowser(id: "s.desktop", path: nil, packaging: .snap, flatpakAppId: nil)
        let host = DefaultBrowser(id: "h.desktop", path: nil, packaging: .host, flatpakAppId: nil)
        typealias S = DesktopSetup
        #expect(S.handbackProblem(handlerIsDefault: true, xdgOpenMangles: false, browser: host) == nil)
        #expect(S.handbackProblem(handlerIsDefault: true, xdgOpenMangles: false, browser: nil) == nil)
        #expect(S.handbackProblem(handlerIsDefault: false, xdgOpenMangles: true, browser: flatpak) == .handlerNotDefault)
        #expect(S.handbackProblem(handlerIsDefault: true, xdgOpenMangles: true, browser: flatpak) == .xdgOpenMangles)
        #expect(S.handbackProblem(handlerIsDefault: true, xdgOpenMangles: false, browser: flatpak) == .flatpakBrowser)
        #expect(S.handbackProblem(handlerIsDefault: true, xdgOpenMangles: false, browser: snap) == .snapBrowser)
        #expect(DesktopSetup.isFlatpakAppId("org.mozilla.firefox"))
        #expect(!DesktopSetup.isFlatpakAppId("--command=sh"))
        #expect(!DesktopSetup.isFlatpakAppId("firefox"))
        #expect(!DesktopSetup.isFlatpakAppId("org.-x.y"))
    }

    /// A Flatpak default browser is started with `flatpak run APP-ID URL`, before $BROWSER and xdg-open;
    /// a configured command is still the only plan.
    @Test func aFlatpakDefaultBrowserIsRunWithFlatpakRun() throws {
        try write("bin/flatpak", "#!/bin/sh\nexit 0\n", executable: true)
        try application(
            "org.mozilla.firefox.desktop", exec: "flatpak run --branch=stable org.mozilla.firefox @@u %u @@",
            types: ["https"])
        try defaults([("https", "org.mozilla.firefox.desktop")])
        var environment = env
        environment["BROWSER_LOGIN_FLATPAK_INFO"] = ""
        let launcher = ProcessBrowserLauncher(environment: environment, logger: Logger(label: "t", minimum: .error))
        let url = "https://login.example.com/browser-login/browser/login?attempt=abc"
        #expect(launcher.plans(url: url, command: nil).first == ["flatpak", "run", "org.mozilla.firefox", url])
        #expect(launcher.plans(url: url, command: "firefox %u") == [["firefox", url]])
        #expect(launcher.handbackProblem(scheme: "com.example.notes", command: nil) == .handlerNotDefault)
        try application(DesktopEntry.fileName, exec: "/bin/true finish %u", types: ["com.example.notes"])
        // Cached for 30 s: a launcher made now sees the handler; the Flatpak browser is the next reason.
        let fresh = ProcessBrowserLauncher(environment: environment, logger: Logger(label: "t", minimum: .error))
        #expect(fresh.handbackProblem(scheme: "com.example.notes", command: nil) == .flatpakBrowser)
        #expect(fresh.handbackProblem(scheme: "com.example.notes", command: "firefox %u") == nil)
        #expect(launcher.handbackProblem(scheme: "com.example.notes", command: nil) == .handlerNotDefault)
    }
}
