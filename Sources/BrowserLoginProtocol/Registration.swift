/// The shape rules of docs/protocol.md §1 for the values a server registers and a
/// broker configures, shared so that both sides check them the same way.
public enum Registration {
    /// `clientId`: `[A-Za-z0-9._-]{1,64}`.
    public static func isValidClientId(_ id: String) -> Bool {
        (1...64).contains(id.utf8.count) && id.utf8.allSatisfy { isASCIIAlphanumeric($0, or: "._-") }
    }

    /// `basePath`: `^(/[A-Za-z0-9._~-]+)+$`.
    public static func isValidBasePath(_ path: String) -> Bool {
        guard path.hasPrefix("/"), path.utf8.count > 1 else { return false }
        return path.dropFirst().split(separator: "/", omittingEmptySubsequences: false).allSatisfy { segment in
            !segment.isEmpty && segment.utf8.allSatisfy { isASCIIAlphanumeric($0, or: "._~-") }
        }
    }
}
