import BrokerCore
import BrowserLoginTestSupport
import Foundation
import Testing

@testable import Broker
@testable import Engine

@Suite("Browser launcher plans")
struct LauncherTests {
    let logger = Logger(label: "test", minimum: .error)
    let url = "https://login.example.com/browser-login/authorize?attempt=abc"

    @Test func aConfiguredTemplateIsTheOnlyPlan() {
        let launcher = ProcessBrowserLauncher(environment: ["BROWSER_LOGIN_FLATPAK_INFO": ""], logger: logger)
        #expect(launcher.plans(url: url, command: "firefox --private-window %u") == [["firefox", "--private-window", url]])
    }

    @Test func theDefaultTriesBrowserThenXdgOpenThenGioOpen() {
        let launcher = ProcessBrowserLauncher(
            environment: ["BROWSER": "w3m:lynx %s", "BROWSER_LOGIN_FLATPAK_INFO": ""], logger: logger)
        #expect(
            launcher.plans(url: url, command: nil) == [
                ["w3m", url], ["lynx", url], ["xdg-open", url], ["gio", "open", url],
            ])
    }

    @Test func insideFlatpakThePortalComesFirst() {
        let launcher = ProcessBrowserLauncher(environment: ["BROWSER_LOGIN_FLATPAK_INFO": "1"], logger: logger)
        let plans = launcher.plans(url: url + "&x='y'", command: nil)
        #expect(plans.first?.contains("org.freedesktop.portal.OpenURI.OpenURI") == true)
        #expect(plans.first?.contains("'\(url)&x=\\'y\\''") == true)
        #expect(plans.dropFirst().first == ["xdg-open", url + "&x='y'"])
    }

    @Test func underSystemdTheBrowserIsStartedInAUnitOfItsOwn() {
        let launcher = ProcessBrowserLauncher(
            environment: ["INVOCATION_ID": "0123", "BROWSER_LOGIN_FLATPAK_INFO": ""], logger: logger)
        let plans = launcher.plans(url: url, command: "firefox %u")
        #expect(plans.count == 1)
        #expect(plans[0].prefix(2) == ["systemd-run", "--user"])
        #expect(plans[0].suffix(2) == ["firefox", url])
        // The unit's description (which systemd logs) never holds the URL.
        #expect(plans[0].first { $0.hasPrefix("--description=") }?.contains(url) == false)
    }

    // MARK: - Launching (real processes)

    @Test func aMissingProgramFailsAtOnceAndTheNextCommandIsTried() async throws {
        let launcher = ProcessBrowserLauncher(
            environment: [
                "BROWSER": "/nonexistent/browser:/bin/true", "BROWSER_LOGIN_FLATPAK_INFO": "", "PATH": "/usr/bin:/bin",
            ],
            logger: logger)
        // /bin/true exits 0 (started) or is still being watched: either way no failure.
        if let watch = try await launcher.launch(url, command: nil, activationToken: nil) {
            #expect(await watch() == nil)
        }
        await #expect(throws: BrokerError.self) {
            _ = try await launcher.launch(url, command: "/nonexistent/browser %u", activationToken: nil)
        }
    }

    @Test func launchAnswersWhileAForegroundCommandRunsAndItsWatchFindsALateFailure() async throws {
        let launcher = ProcessBrowserLauncher(environment: ["BROWSER_LOGIN_FLATPAK_INFO": ""], logger: logger)
        // Fails after the 40 ms `launch` watches, within the 2 s in which a failure counts.
        let command = "/bin/sh -c 'sleep 0.3; exit 3' %u"
        let watch = try #require(try await launcher.launch(url, command: command, activationToken: nil))
        let failure = await watch()
        #expect(failure?.code == .browserFailed)
        #expect(failure?.message.contains("exit status 3") == true)
        #expect(failure?.message.contains(url) == false)
        // `open` waits for the same answer.
        await #expect(throws: BrokerError.self) { try await launcher.open(url, command: command) }
    }

    @Test func aCommandStillRunningAtTheEndOfTheWindowHasStarted() async throws {
        let temporary = try TemporaryDirectory("launch")
        let gate = temporary.path + "/gate"
        defer { _ = FileManager.default.createFile(atPath: gate, contents: nil) }
        let launcher = ProcessBrowserLauncher(environment: ["BROWSER_LOGIN_FLATPAK_INFO": ""], logger: logger)
        let command = "/bin/sh -c 'i=0; while [ ! -e \(gate) ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done' %u"
        let watch = try #require(try await launcher.launch(url, command: command, activationToken: nil))
        #expect(await watch() == nil)
    }
}
