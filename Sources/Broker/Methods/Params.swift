import BrokerRPC
import Engine

/// Named params of one call, checked strictly: positional params and
/// unknown names are `-32602`. Each method's typed params (BrowserLoginAPI)
/// are read from it with the messages of docs/rpc.md.
struct Params: Sendable {
    /// The params by name, each name once. Not a dictionary: a method has a
    /// few params, found faster by comparing names than by hashing them.
    let members: [(String, JSONValue)]

    /// `allowed`: the method's param names.
    init(_ raw: JSONValue?, allowed: [String]) throws(RPCError) {
        switch raw {
        case nil, .null?: try self.init(members: [], allowed: allowed)
        case .object(let o)?: try self.init(members: o.map { ($0.key, $0.value) }, allowed: allowed)
        default: throw RPCError.invalidParams("params must be an object of named parameters")
        }
    }

    /// `members`: an object's members, no name twice (the RPC server's fast path gives them so).
    init(members: [(String, JSONValue)], allowed: [String]) throws(RPCError) {
        self.members = members
        // The common case checked without sorting; the first unknown name in order is the one named.
        if members.allSatisfy({ allowed.contains($0.0) }) { return }
        for key in members.map(\.0).sorted() where !allowed.contains(key) {
            throw RPCError.invalidParams("unknown parameter '\(key)'")
        }
    }

    /// The param `key` converted by `convert`; nil when absent or null, `'key' must be WHAT` when not convertible.
    private func read<T>(_ key: String, _ what: String, _ convert: (JSONValue) -> T?) throws(RPCError) -> T? {
        guard let value = members.first(where: { $0.0 == key })?.1, value != .null else { return nil }
        guard let converted = convert(value) else { throw RPCError.invalidParams("'\(key)' must be \(what)") }
        return converted
    }

    func optionalString(_ key: String) throws(RPCError) -> String? { try read(key, "a string", \.stringValue) }

    func string(_ key: String) throws(RPCError) -> String {
        guard let s = try optionalString(key) else { throw RPCError.invalidParams("'\(key)' is required") }
        return s
    }

    func bool(_ key: String) throws(RPCError) -> Bool? { try read(key, "true or false", \.boolValue) }

    func int(_ key: String) throws(RPCError) -> Int? { try read(key, "an integer") { $0.intValue.map { Int($0) } } }

    func stringArray(_ key: String) throws(RPCError) -> [String]? {
        try read(key, "an array of strings") { value in
            value.arrayValue.flatMap { items in
                let strings = items.compactMap(\.stringValue)
                return strings.count == items.count ? strings : nil
            }
        }
    }

    /// An object of strings, in the order of its sorted names; `check` sees each member in turn.
    func stringObject(
        _ key: String, check: (String, String) throws(RPCError) -> Void = { _, _ in }
    ) throws(RPCError) -> [(String, String)]? {
        guard let members = try read(key, "an object of strings", \.objectValue) else { return nil }
        var out: [(String, String)] = []
        for name in members.keys.sorted() {
            guard let s = members[name]?.stringValue else {
                throw RPCError.invalidParams("'\(key)' must be an object of strings")
            }
            try check(name, s)
            out.append((name, s))
        }
        return out
    }
}
