import BrowserLoginProtocol

// The JSON value of the RPC messages is BrowserLoginProtocol's (shared with the
// protocol bodies and their Foundation-free Codable coders); these names keep
// `import BrokerRPC` enough for its users.
public typealias JSONValue = BrowserLoginProtocol.JSONValue
public typealias JSONParseError = BrowserLoginProtocol.JSONParseError
public typealias JSONCodingError = BrowserLoginProtocol.JSONCodingError
