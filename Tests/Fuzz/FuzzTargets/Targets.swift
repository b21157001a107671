import BrokerJOSE
import BrokerRPC
import BrokerSystem
import BrowserLoginProtocol
import Foundation
import LoginServer

/// The fuzz targets (docs/reliability.md, "Fuzzing"). Each takes any bytes;
/// a refusal is a normal outcome, a crash (or a broken property, see
/// `fuzzCheck`) is a finding. The fuzz programs and the regression test
/// (`Tests/FuzzRegressionTests`) run the same entries.
public enum FuzzTargets {
    public struct Target: Sendable {
        public let name: String
        public let run: @Sendable ([UInt8]) -> Void
    }

    public static let all: [Target] = [
        strictJSON, rpcFraming, rpcMessage, callbackURL, clientFile, serverRequest, jose, webauthn,
    ]

    /// The reference server's passkey checks (docs/server.md, "Passkeys"): libcbor's reading of
    /// attestation objects and COSE keys, authenticator data, client data (`PasskeyFuzzing`).
    public static let webauthn = Target(name: "webauthn") { bytes in
        PasskeyFuzzing.run(bytes) { holds, message in fuzzCheck(holds, message) }
    }

    public static func named(_ name: String) -> Target? { all.first { $0.name == name } }

    /// The strict JSON decoder (docs/protocol.md §4) on every wire type, and timestamps.
    public static let strictJSON = Target(name: "strict-json") { bytes in
        let data = Data(bytes)
        let valid = (try? StrictJSON.validateObject(data)) != nil
        func decode<T: Decodable>(_ type: T.Type) {
            if (try? StrictJSON.decode(type, from: data)) != nil { fuzzCheck(valid, "decoded \(T.self) but not valid") }
        }
        let types: [any Decodable.Type] = [
            CreateAttemptRequest.self, CreateAttemptResponse.self, ExchangeRequest.self, ExchangeResponse.self,
            RecoveryRequest.self, StatusResponse.self, SessionInfoResponse.self, RefreshResponse.self,
            RevokeByProofRequest.self, DescribeResponse.self, AuthorizeRequest.self, ErrorBody.self,
        ]
        for type in types { decode(type) }
        // §4: times parse only in the strict form, which formats back byte for byte.
        let text = String(decoding: bytes, as: UTF8.self)
        if let time = Timestamp(rfc3339: text) { fuzzCheck(time.rfc3339 == text, "timestamp \(text) → \(time.rfc3339)") }
    }

    /// Both RPC framings (docs/rpc.md), fed in pieces: the first byte picks the
    /// framing (or detection), the piece size and the size limit.
    /// Properties: the pieces never change the messages; every message frames
    /// back to itself; the message decoder takes each message.
    public static let rpcFraming = Target(name: "rpc-framing") { bytes in
        guard let control = bytes.first else { return }
        let framing: RPCFraming? = [nil, .ndjson, .contentLength][Int(control % 3)]
        let stream = bytes.dropFirst()
        let piece = Int(control / 3 % 8) * 3 + 1
        let limit = control & 0x80 != 0 ? 64 : RPCFrameDecoder.defaultMaxMessageSize
        var whole = RPCFrameDecoder(framing: framing, maxMessageSize: limit)
        let atOnce = whole.feed(stream)
        var pieces = RPCFrameDecoder(framing: framing, maxMessageSize: limit)
        var inPieces: [RPCFrameEvent] = []
        var index = stream.startIndex
        while index < stream.endIndex {
            let end = stream.index(index, offsetBy: piece, limitedBy: stream.endIndex) ?? stream.endIndex
            inPieces += pieces.feed(stream[index..<end])
            index = end
        }
        fuzzCheck(atOnce == inPieces, "pieces of \(piece) bytes decode differently: \(atOnce) vs \(inPieces)")
        for case .message(let message) in atOnce {
            guard let used = whole.framing else { break }
            // A line ending "\r\r\n" keeps one "\r" (JSON whitespace); written again, it is the line end.
            if used == .ndjson && message.last == 0x0D { continue }
            var again = RPCFrameDecoder(framing: used, maxMessageSize: limit)
            let reframed = again.feed(RPCFrameEncoder.encode(message, framing: used))
            fuzzCheck(reframed == [.message(message)], "\(used) message does not frame back: \(reframed)")
            _ = RPCCodec.decodeIncoming(message)
        }
    }

    /// One RPC message (docs/rpc.md): the server's decoder straight from jansson's
    /// tree must agree with its decoder of the parsed value; the client's
    /// decoder; and a parsed value serializes back to itself.
    public static let rpcMessage = Target(name: "rpc-message") { bytes in
        let direct = RPCCodec.decodeIncoming(bytes)
        _ = RPCCodec.decodeClientMessage(bytes)
        guard let json = try? JSONValue.parse(bytes) else {
            if case .rejected(let error) = direct { fuzzCheck(error.code == .parseError, "not JSON but \(error)") }
            return
        }
        let viaValue = RPCCodec.decodeIncoming(json: json)
        fuzzCheck(direct == viaValue, "the two server decoders disagree: \(direct) vs \(viaValue)")
        // The fast path's reading, where it has one, is the decoder's single request.
        if let plain = RPCCodec.plainRequest(Array(bytes)) {
            guard case .single(.request(let request)) = direct else {
                fuzzCheck(false, "the fast path took what is not a single request: \(direct)")
                return
            }
            let names = plain.params.map(\.0)
            fuzzCheck(Set(names).count == names.count, "the fast path gave a name twice")
            let members = Dictionary(plain.params) { first, _ in first }
            fuzzCheck(
                request.id == plain.id && request.method == plain.method
                    && (request.params ?? .object([:])) == .object(members),
                "the fast path reads \(plain.method) otherwise than the decoder: \(direct)")
        }
        let reparsed = try? JSONValue.parse(json.serialized())
        fuzzCheck(reparsed == json, "\(json.jsonText) does not parse back to itself")
    }

    /// The callback URL parser (docs/protocol.md §7) and the return URL rules and
    /// matcher (§1). Properties: a parsed callback rebuilt with
    /// `Callback.url` parses back to itself; a valid return URL matches itself
    /// (a loopback redirect with a port added, and not without one).
    public static let callbackURL = Target(name: "callback") { bytes in
        let text = String(decoding: bytes, as: UTF8.self)
        if let callback = try? Callback(parsing: text) {
            let target = callback.target
            let base = target.scheme + ":" + (target.authority.map { "//" + $0 } ?? "") + target.path
            let rebuilt = Callback.url(
                returnURL: base, outcome: callback.outcome, attempt: callback.attempt, issuer: callback.issuer)
            if rebuilt.utf8.count <= Callback.maximumLength {
                let again = try? Callback(parsing: rebuilt)
                fuzzCheck(again == callback, "\(text) rebuilt as \(rebuilt) parses differently")
            }
        }
        // A standard provider's callback (docs/providers.md): what parses names a state and one outcome.
        if let callback = try? ProviderCallback(parsing: text) {
            fuzzCheck(!callback.state.isEmpty, "\(text) parsed without a state")
            fuzzCheck(callback.target.query == nil, "\(text) kept its query in the target")
        }
        _ = ProviderCallback.isProviderCallback(text)
        if let returnURL = try? ReturnURL(text) {
            // A loopback redirect is registered without a port and matches only
            // with one (§1): it matches itself with a port, never bare.
            let withPort = returnURL.attemptURL(requested: "http://127.0.0.1:49152/")
            fuzzCheck(
                URLParts(splitting: withPort).map(returnURL.matches) == true, "\(text) does not match \(withPort)")
            fuzzCheck(
                URLParts(splitting: text).map(returnURL.matches) == !returnURL.isLoopback,
                returnURL.isLoopback ? "\(text) matches without a port" : "\(text) does not match itself")
        }
        _ = try? Origin(text)
    }

    /// A client drop-in file (`clients.d/*.conf`, GKeyFile) parsed and validated.
    public static let clientFile = Target(name: "client-file") { bytes in
        let (client, problems) = ClientFiles.parse(contents: bytes, file: "fuzz.conf")
        fuzzCheck(client != nil || !problems.isEmpty, "a file refused without a problem")
    }

    /// The reference server's request handling: see `ServerRequestFuzzing`.
    public static let serverRequest = Target(name: "server-request") { bytes in ServerRequestFuzzing.run(bytes) }

    /// A provider's key set and ID tokens (docs/providers.md): any bytes as a
    /// JWKS, and as a token verified against it and against an empty set.
    /// Property: nothing verifies without a usable key.
    public static let jose = Target(name: "jose") { bytes in
        let keys = try? JWKSet(json: bytes)
        let text = String(decoding: bytes, as: UTF8.self)
        _ = try? IDToken.header(text)
        let expect = IDTokenExpectations(issuer: "https://id.example.com", clientId: "c", nonce: "n", now: 1_800_000_000)
        if let empty = try? JWKSet(json: Array(#"{"keys":[]}"#.utf8)) {
            fuzzCheck((try? IDToken.verify(text, keys: empty, expect: expect)) == nil, "a token verified with no key")
        }
        if let keys { _ = try? IDToken.verify(text, keys: keys, expect: expect) }
    }
}
