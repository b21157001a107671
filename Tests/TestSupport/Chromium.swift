import Foundation

/// Debian's chromium and chromium-driver, and Selenium in the project's own
/// virtual environment (`scripts/selenium`, installed by `scripts/install-deps
/// --browser`): the real browser of the hosted page's tests.
public enum HeadlessChromium {
    /// The virtual environment's Python (`BL_SELENIUM_VENV`, default
    /// ~/.cache/browser-login/selenium-venv, as scripts/selenium makes it).
    public static let python: String = {
        let environment = ProcessInfo.processInfo.environment
        let venv =
            environment["BL_SELENIUM_VENV"] ?? (environment["HOME"] ?? "/root") + "/.cache/browser-login/selenium-venv"
        return venv + "/bin/python"
    }()

    public static var isReady: Bool {
        FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium")
            && FileManager.default.isExecutableFile(atPath: "/usr/bin/chromedriver")
            && ((try? runProgram(python, ["-c", "import selenium"], timeout: 30))?.status == 0)
    }

    /// The head of an agent script: Selenium's imports (`webdriver`, `By`,
    /// `ready`, `WebDriverWait`, `sys`) and `driver`, a headless Chromium.
    public static let prelude = """
        import json, sys
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as ready
        from selenium.webdriver.support.ui import WebDriverWait

        options = webdriver.ChromeOptions()
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
            options.add_argument(flag)
        options.binary_location = "/usr/bin/chromium"
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)

        """

    /// Runs the agent `script` with `arguments`; Chromium's profile and
    /// scratch files stay in `directory` (a test's own).
    public static func run(_ script: String, _ arguments: [String], in directory: String) throws -> (
        status: Int32, out: String, err: String
    ) {
        let path = directory + "/chromium-agent-\(UUID().uuidString).py"
        try Data(script.utf8).write(to: URL(fileURLWithPath: path))
        var environment = ProcessInfo.processInfo.environment
        environment["TMPDIR"] = directory + "/chromium"
        try FileManager.default.createDirectory(atPath: directory + "/chromium", withIntermediateDirectories: true)
        return try runProgram(python, [path] + arguments, environment: environment, timeout: 120)
    }
}
