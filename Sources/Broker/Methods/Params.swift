import BrokerRPC

/// Named params of one call, checked strictly: positional params and
/// unknown names are `-32602`. Each method's typed params (BrowserLoginAPI)
/// are read from it with the messages of docs/rpc.md.
struct Params: Sendable {
    let object: [String: JSONValue]

    init(_ raw: JSONValue?, allowed: Set<String>) throws(RPCError) {
        switch raw {
        case nil, .null?: object = [:]
        case .object(let o)?: object = o
        default: throw RPCError.invalidParams("params must be an object of named parameters")
        }
        for key in object.keys.sorted() where !allowed.contains(key) {
            throw RPCError.invalidParams("unknown parameter '\(key)'")
        }
    }

    func optionalString(_ key: String) throws(RPCError) -> String? {
        guard let value = object[key], value != .null else { return nil }
        guard let s = value.stringValue else { throw RPCError.invalidParams("'\(key)' must be a string") }
        return s
    }

    func string(_ key: String) throws(RPCError) -> String {
        guard let s = try optionalString(key) else { throw RPCError.invalidParams("'\(key)' is required") }
        return s
    }

    func bool(_ key: String) throws(RPCError) -> Bool? {
        guard let value = object[key], value != .null else { return nil }
        guard let b = value.boolValue else { throw RPCError.invalidParams("'\(key)' must be true or false") }
        return b
    }

    func int(_ key: String) throws(RPCError) -> Int? {
        guard let value = object[key], value != .null else { return nil }
        guard let i = value.intValue else { throw RPCError.invalidParams("'\(key)' must be an integer") }
        return Int(i)
    }

    func stringArray(_ key: String) throws(RPCError) -> [String]? {
        guard let value = object[key], value != .null else { return nil }
        guard let items = value.arrayValue else { throw RPCError.invalidParams("'\(key)' must be an array of strings") }
        var out: [String] = []
        for item in items {
            guard let s = item.stringValue else { throw RPCError.invalidParams("'\(key)' must be an array of strings") }
            out.append(s)
        }
        return out
    }

    /// An object of strings, in the order of its sorted names; `check` sees each member in turn.
    func stringObject(
        _ key: String, check: (String, String) throws(RPCError) -> Void = { _, _ in }
    ) throws(RPCError) -> [(String, String)]? {
        guard let value = object[key], value != .null else { return nil }
        let problem = RPCError.invalidParams("'\(key)' must be an object of strings")
        guard let members = value.objectValue else { throw problem }
        var out: [(String, String)] = []
        for name in members.keys.sorted() {
            guard let s = members[name]?.stringValue else { throw problem }
            try check(name, s)
            out.append((name, s))
        }
        return out
    }
}
