import CGIO
import Synchronization
import SystemSupport

/// The desktop's proxy settings, read through GIO's default `GProxyResolver`
/// (GNOME's settings, libproxy, or the desktop portal in a sandbox, as the
/// session provides; "direct" when none is installed).
///
/// Used only when the environment names no proxy: the proxy variables are the
/// user's explicit choice and libcurl reads them itself, as the `curl` program
/// does. Answers are cached per origin for a short while, so a sign-in's
/// requests do not each ask the resolver (which may ask D-Bus or run a PAC
/// script). Loopback origins are never looked up (the transport skips them).
public final class DesktopProxyResolver: Sendable {
    /// The variables libcurl takes a proxy from (`http_proxy` in lower case
    /// only, as curl reads it, so that a CGI's `HTTP_PROXY` request header
    /// cannot choose one). `no_proxy` is not one: it only exempts hosts, and it
    /// does so for the desktop's proxies too.
    public static let environmentVariables = ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]

    /// Whether `environment` names a proxy (one of `environmentVariables` set
    /// and not empty): the environment then decides, not the desktop.
    public static func environmentNamesProxy(_ environment: [String: String]) -> Bool {
        environmentVariables.contains { environment[$0].map { !$0.isEmpty } ?? false }
    }

    private struct Entry {
        let proxy: String?
        let expires: ContinuousClock.Instant
    }

    private let cache = Mutex<[String: Entry]>([:])
    private let lifetime: Duration
    private let logger: Logger

    /// `cacheLifetime`: how long an origin's answer is reused (a settings
    /// change takes effect within it).
    public init(logger: Logger, cacheLifetime: Duration = .seconds(30)) {
        self.logger = logger
        self.lifetime = cacheLifetime
    }

    /// The proxy for `origin` (`https://host:port`) as a URL libcurl accepts,
    /// or nil for a direct connection (GIO's `direct://`, no usable proxy, or
    /// a resolver failure, which is logged at debug level). Blocks while the
    /// resolver works; call it off the cooperative thread pool.
    public func proxy(forOrigin origin: String) -> String? {
        let now = ContinuousClock.now
        if let hit = cache.withLock({ $0[origin] }), hit.expires > now { return hit.proxy }
        let proxy = resolve(origin)
        cache.withLock { entries in
            if entries.count >= 256 { entries = entries.filter { $0.value.expires > now } }
            entries[origin] = Entry(proxy: proxy, expires: now + lifetime)
        }
        return proxy
    }

    private func resolve(_ origin: String) -> String? {
        guard let resolver = g_proxy_resolver_get_default() else {
            logger.debug("no proxy resolver; connecting directly", ["origin": origin])
            return nil
        }
        var error: UnsafeMutablePointer<GError>?
        guard let list = g_proxy_resolver_lookup(resolver, origin, nil, &error) else {
            logger.debug(
                "the desktop's proxy settings could not be read; connecting directly",
                ["origin": origin, "error": takeMessage(error)])
            return nil
        }
        defer { g_strfreev(list) }
        var offered: [String] = []
        var index = 0
        while let entry = list[index] {
            offered.append(String(cString: entry))
            index += 1
        }
        let choice = ProxyURL.usable(offered)
        logger.debug(
            "proxy from the desktop's settings",
            ["origin": origin, "proxy": choice.map(ProxyURL.redacted) ?? "direct"])
        return choice
    }
}

/// Proxy URLs as GIO gives them and libcurl takes them.
public enum ProxyURL {
    /// libcurl's proxy schemes.
    static let schemes: Set = ["http", "https", "socks4", "socks4a", "socks5", "socks5h"]

    /// The first of GIO's answers libcurl can use, in GIO's order of
    /// preference: nil for `direct://` (or when none is usable). GIO's generic
    /// `socks://` becomes `socks5h://` (SOCKS 5, names resolved by the proxy).
    public static func usable(_ offered: [String]) -> String? {
        for proxy in offered {
            guard let separator = proxy.firstRange(of: "://") else { continue }
            let scheme = proxy[..<separator.lowerBound].lowercased()
            if scheme == "direct" { return nil }
            if scheme == "socks" { return "socks5h" + proxy[separator.lowerBound...] }
            if schemes.contains(scheme) { return proxy }
        }
        return nil
    }

    /// `proxy` without credentials (`http://user:password@host:3128` becomes
    /// `http://host:3128`) and without a path: what may be logged.
    public static func redacted(_ proxy: String) -> String {
        guard let separator = proxy.firstRange(of: "://") else { return "(not a URL)" }
        let rest = proxy[separator.upperBound...]
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        let host = authority.lastIndex(of: "@").map { authority[authority.index(after: $0)...] } ?? authority
        return String(proxy[..<separator.upperBound] + host)
    }
}
