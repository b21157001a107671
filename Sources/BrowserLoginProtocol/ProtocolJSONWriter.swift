/// A protocol body that writes itself straight to bytes, without building
/// the `JSONValue` tree that `Encodable` goes through (the reference server's
/// two busiest answers: a create's and an exchange's). `ProtocolJSON.encode`
/// uses it when the value has one. What it writes must be what
/// `JSONValueEncoder.serialize` writes for the same value, byte for byte:
/// members sorted by their keys' UTF-8 bytes, a nil optional left out
/// (Tests/BrowserLoginProtocolTests/ProtocolJSONWriterTests.swift compares
/// the two).
public protocol ProtocolJSONWritable: Encodable {
    func write(to json: inout ProtocolJSONWriter)
}

/// Writes JSON objects member by member, in the order given. Keys are
/// literals that need no escape (`StaticString`, ASCII names), given in
/// sorted order (checked in debug builds); string values are escaped as
/// `JSONValue.serializedForProtocol` escapes them.
public struct ProtocolJSONWriter {
    public private(set) var bytes: [UInt8] = []
    /// Per open object: whether a member was written yet.
    private var started: [Bool] = []
    #if DEBUG
        /// Per open object: the last key written, to check the order.
        private var lastKeys: [[UInt8]] = []
    #endif

    public init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    /// Writes one object; `members` writes its members.
    public mutating func object(_ members: (inout ProtocolJSONWriter) -> Void) {
        bytes.append(UInt8(ascii: "{"))
        started.append(false)
        #if DEBUG
            lastKeys.append([])
        #endif
        members(&self)
        started.removeLast()
        #if DEBUG
            lastKeys.removeLast()
        #endif
        bytes.append(UInt8(ascii: "}"))
    }

    public mutating func member(_ key: StaticString, _ value: String) {
        writeKey(key)
        JSONValue.writeProtocolString(value, to: &bytes)
    }

    /// Leaves the member out when `value` is nil, as `encodeIfPresent` does.
    public mutating func member(_ key: StaticString, _ value: String?) {
        guard let value else { return }
        member(key, value)
    }

    public mutating func member(_ key: StaticString, _ value: Timestamp) {
        writeKey(key)
        bytes.append(UInt8(ascii: "\""))
        value.writeRFC3339(to: &bytes)
        bytes.append(UInt8(ascii: "\""))
    }

    public mutating func member(_ key: StaticString, _ value: Timestamp?) {
        guard let value else { return }
        member(key, value)
    }

    public mutating func member(_ key: StaticString, _ value: some ProtocolJSONWritable) {
        writeKey(key)
        value.write(to: &self)
    }

    private mutating func writeKey(_ key: StaticString) {
        precondition(!started.isEmpty, "a member outside an object")
        if started[started.count - 1] { bytes.append(UInt8(ascii: ",")) }
        started[started.count - 1] = true
        key.withUTF8Buffer { name in
            #if DEBUG
                assert(
                    lastKeys[lastKeys.count - 1].lexicographicallyPrecedes(name),
                    "members out of order: \(key) after \(String(decoding: lastKeys[lastKeys.count - 1], as: UTF8.self))")
                assert(name.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != 0x22 && $0 != 0x5C }, "a key that needs escaping")
                lastKeys[lastKeys.count - 1] = Array(name)
            #endif
            bytes.append(UInt8(ascii: "\""))
            bytes.append(contentsOf: name)
            bytes.append(UInt8(ascii: "\""))
        }
        bytes.append(UInt8(ascii: ":"))
    }
}

// MARK: - The bodies written directly

extension CreateAttemptResponse: ProtocolJSONWritable {
    public func write(to json: inout ProtocolJSONWriter) {
        json.object { json in
            json.member("attemptId", attemptId)
            json.member("authorizeUrl", authorizeUrl)
            json.member("expiresAt", expiresAt)
            json.member("issuer", issuer)
        }
    }
}

extension Account: ProtocolJSONWritable {
    public func write(to json: inout ProtocolJSONWriter) {
        json.object { json in
            json.member("displayName", displayName)
            json.member("email", email)
            json.member("userId", userId)
        }
    }
}

extension IssuedSession: ProtocolJSONWritable {
    public func write(to json: inout ProtocolJSONWriter) {
        json.object { json in
            json.member("accessToken", accessToken)
            json.member("accessTokenExpiresAt", accessTokenExpiresAt)
            json.member("account", account)
            json.member("authMethod", authMethod)
            json.member("authenticatedAt", authenticatedAt)
            json.member("dpopKey", dpopKey)
            json.member("expiresAt", expiresAt)
            json.member("refreshToken", refreshToken)
            json.member("sessionId", sessionId)
        }
    }
}

extension Receipt: ProtocolJSONWritable {
    public func write(to json: inout ProtocolJSONWriter) {
        json.object { json in
            json.member("attemptId", attemptId)
            json.member("issuedAt", issuedAt)
            json.member("sessionId", sessionId)
            json.member("tokenDigest", tokenDigest)
        }
    }
}

extension ExchangeResponse: ProtocolJSONWritable {
    public func write(to json: inout ProtocolJSONWriter) {
        json.object { json in
            json.member("receipt", receipt)
            json.member("session", session)
        }
    }
}
