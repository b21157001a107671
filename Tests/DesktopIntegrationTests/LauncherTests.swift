import Foundation
import Testing

@testable import Broker

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
}
