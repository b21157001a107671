import BrokerCore
import DesktopEntry
import Foundation
import SystemSupport

/// The broker's start-up registration of the URL handler, for clients whose
/// file says `InstallHandler=true`: the same desktop file and the same steps
/// as `browser-login install-handler`.
public enum HandlerRegistration {
    /// Installs the handler for the schemes of `clients` that ask for it; nil when none do.
    public static func installAtStartUp(
        clients: [ClientConfig], environment: [String: String], handlerProgram: String
    ) -> HandlerInstaller.Report? {
        let schemes = clients.filter(\.installHandler).map(\.returnURL.scheme)
        guard !schemes.isEmpty else { return nil }
        return HandlerInstaller(environment: environment).install(schemes: schemes, exec: handlerProgram)
    }

    /// The CLI installed next to this executable (`browser-login`), else the name on `PATH`.
    public static func handlerProgram() -> String {
        let exe = ProcFS.executable() ?? ""
        let sibling = URL(fileURLWithPath: exe).deletingLastPathComponent().appendingPathComponent("browser-login").path
        return !exe.isEmpty && FileManager.default.isExecutableFile(atPath: sibling) ? sibling : "browser-login"
    }
}
