#if canImport(Glibc)
    import Glibc
#endif

/// The broker's desktop file: the URL handler for each client's scheme.
///
/// Plain text and subprocesses only (no GLib), so the CLI can use it as well
/// as the daemon. The file's name is the D-Bus application id, which is also
/// the bus name the daemon owns: with `DBusActivatable=true`, `gio open` and
/// desktops call `org.freedesktop.Application.Open` on that name instead of
/// running `Exec=`.
public enum DesktopEntry {
    /// The application id: the desktop file's name and the daemon's bus name.
    public static let applicationId = "org.browserlogin.Broker"
    /// The object path of `org.freedesktop.Application` (the id with dots as slashes).
    public static let objectPath = "/org/browserlogin/Broker"
    public static let fileName = applicationId + ".desktop"

    /// A scheme a desktop file can name: RFC 3986 `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`, lower case.
    public static func isValidScheme(_ scheme: String) -> Bool {
        guard let first = scheme.utf8.first, first >= 0x61 && first <= 0x7A else { return false }
        return scheme.utf8.allSatisfy { b in
            (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == UInt8(ascii: "+") || b == UInt8(ascii: "-")
                || b == UInt8(ascii: ".")
        }
    }

    /// The scheme of a URL (`com.example.notes:/callback` → `com.example.notes`), when it has a valid one.
    public static func scheme(ofURL url: String) -> String? {
        guard let colon = url.firstIndex(of: ":") else { return nil }
        let scheme = String(url[..<colon])
        return isValidScheme(scheme) ? scheme : nil
    }

    public static func mimeType(scheme: String) -> String { "x-scheme-handler/" + scheme }

    /// The desktop file's text. `exec` is the URL handler program (the CLI);
    /// it is quoted as the Desktop Entry Specification asks when it needs to be.
    public static func text(exec: String, schemes: [String]) -> String {
        let mimeTypes = Set(schemes).sorted().map { mimeType(scheme: $0) + ";" }.joined()
        return template.replacing("@bindir@/browser-login", with: quoteExecArgument(exec))
            .replacing("@mimetypes@", with: mimeTypes)
    }

    /// The template shipped as `dbus/org.browserlogin.Broker.desktop.in`
    /// (`make install` copies it; a test checks the two are the same).
    public static let template = """
        [Desktop Entry]
        Type=Application
        Name=Browser Login
        Comment=Completes sign-ins that return from the browser
        Exec=@bindir@/browser-login finish %u
        NoDisplay=true
        Terminal=false
        DBusActivatable=true
        MimeType=@mimetypes@

        """

    /// The schemes an existing desktop file handles (its `MimeType=` key).
    public static func schemes(inDesktopFile text: String) -> [String] {
        let line = text.split(separator: "\n").first { $0.hasPrefix("MimeType=") } ?? ""
        return line.dropFirst("MimeType=".count).split(separator: ";").compactMap { type in
            type.hasPrefix("x-scheme-handler/") ? String(type.dropFirst("x-scheme-handler/".count)) : nil
        }
    }

    /// Quotes an `Exec=` argument when it has characters the specification reserves.
    static func quoteExecArgument(_ argument: String) -> String {
        let reserved = Set(" \t\n\"'\\><~|&;$*?#()`")
        guard argument.contains(where: { reserved.contains($0) }) else { return argument }
        var quoted = "\""
        for c in argument {
            if c == "\"" || c == "`" || c == "$" || c == "\\" { quoted += "\\\\" }
            quoted.append(c)
        }
        return quoted + "\""
    }
}
