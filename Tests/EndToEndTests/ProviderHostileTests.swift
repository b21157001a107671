import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The hostile end of a sign-in at a standard provider (docs/providers.md
/// "Signing in through the browser"), against django-oauth-toolkit
/// (Tests/Provider/README.md) and the real broker: a callback is accepted
/// only if it is exactly its attempt's redirect, with its state and its
/// provider's `iss`; anything else is refused and changes nothing. A code is
/// exchanged once, an ID token is checked before anything is kept, and an
/// exchange without a definite answer ends the attempt and is never re-sent.
@Suite(.dedicatedThread, .enabled(if: TestProvider.shouldRun)) struct ProviderHostileTests {
    /// Forged or misdirected callbacks of one waiting attempt: each is
    /// refused with its own code and leaves the attempt waiting; the genuine
    /// callback then still signs in.
    @Test func forgedCallbacksAreRefusedAndChangeNothing() throws {
        let world = try ProviderWorld()
        let rpc = try world.h.rpc()
        let (attempt, url) = try world.start()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let genuine = try world.provider.authorize(url)
        let state = try #require(CallbackURL.value(genuine, "state"))
        let code = try #require(CallbackURL.value(genuine, "code"))
        let port = try #require(URLParts(splitting: genuine)?.portText.flatMap { Int($0) })
        #expect(CallbackURL.value(genuine, "iss") == percentEncode(world.provider.issuer))

        let otherState = (state.first == "A" ? "B" : "A") + String(state.dropFirst())
        // A waiting attempt of another client of the same provider (a client has one waiting attempt).
        let (other, otherURL) = try world.start("com.example.chatscheme")
        #expect(other["attemptId"] != attempt["attemptId"])
        let otherId = try #require(other["attemptId"]?.stringValue)
        let otherAttemptState = try #require(CallbackURL.value(otherURL, "state"))
        let otherIssuer = percentEncode("http://127.0.0.1:\(port == 1 ? 2 : 1)/o")
        let refused: [(what: String, url: String, code: String)] = [
            // The state is the attempt's key: another one names no attempt.
            ("another state", CallbackURL.replacing(genuine, "state", with: otherState), "ATTEMPT_UNKNOWN"),
            ("a state one character longer", CallbackURL.replacing(genuine, "state", with: state + "A"), "ATTEMPT_UNKNOWN"),
            ("another issuer (RFC 9207)", CallbackURL.replacing(genuine, "iss", with: otherIssuer), "ISSUER_MISMATCH"),
            (
                "the issuer with a trailing slash",
                CallbackURL.replacing(genuine, "iss", with: percentEncode(world.provider.issuer + "/")),
                "ISSUER_MISMATCH"
            ),
            // Found by its state, but this is not the redirect that attempt sent.
            (
                "the state of another attempt", CallbackURL.replacing(genuine, "state", with: otherAttemptState),
                "CALLBACK_MISMATCH"
            ),
            // DOT's metadata says authorization_response_iss_parameter_supported.
            ("no iss although the provider promises it", CallbackURL.replacing(genuine, "iss", with: nil), "CALLBACK_INVALID"),
            (
                "the redirect on another port", CallbackURL.replacingPort(genuine, with: port == 1 ? 2 : port - 1),
                "CALLBACK_MISMATCH"
            ),
            (
                "the redirect on another path",
                genuine.replacingOccurrences(of: ":\(port)/callback?", with: ":\(port)/callback2?"), "CALLBACK_MISMATCH"
            ),
            (
                "the redirect on ::1", genuine.replacingOccurrences(of: "127.0.0.1:\(port)", with: "[::1]:\(port)"),
                "CALLBACK_MISMATCH"
            ),
            ("the redirect over https", "https" + genuine.dropFirst("http".count), "CALLBACK_MISMATCH"),
            ("the code twice", genuine + "&code=" + code, "CALLBACK_INVALID"),
            ("a code and an error", genuine + "&error=access_denied", "CALLBACK_INVALID"),
            ("a fragment", genuine + "#x", "CALLBACK_INVALID"),
        ]
        for forged in refused {
            #expect(forged.url != genuine, "\(forged.what)")
            #expect(
                try errorCode(rpc, "login.finish", ["url": .string(forged.url)]) == forged.code, "\(forged.what)")
            #expect(try attemptState(rpc, id) == "waiting", "after \(forged.what)")
            #expect(try attemptState(rpc, otherId) == "waiting", "after \(forged.what)")
        }

        // The listener itself: another path is not found, another method not
        // allowed, a wrong state on its path is a refused callback.
        let origin = "http://127.0.0.1:\(port)"
        let query = String(genuine.drop { $0 != "?" })
        #expect(try world.provider.get(origin + "/elsewhere" + query).status == 404)
        #expect(try world.provider.get(origin + "/" + query).status == 404)
        #expect(try world.provider.get(origin + "/callback/" + query).status == 404)
        #expect(try world.provider.request("POST", origin + "/callback" + query).status == 405)
        let wrongState = try world.provider.get(
            CallbackURL.replacing(genuine, "state", with: otherState))
        #expect(wrongState.status == 400)
        #expect(!wrongState.text.contains(code) && !wrongState.text.contains(state))
        #expect(try attemptState(rpc, id) == "waiting")
        let unused = try world.provider.tokenCounts()
        #expect(unused.access == 0 && unused.refresh == 0, "no code was exchanged: \(unused)")

        // The genuine callback still signs in.
        let finished = try rpc.call("login.finish", params: ["url": .string(genuine)])
        #expect(finished["state"] == "completed")
        #expect(try world.session()["status"] == "signedIn")
    }

    /// A private-use scheme redirect (RFC 8252 §7.1), delivered by the URL
    /// handler, is held to the same rules: exactly the attempt's redirect.
    @Test func aPrivateSchemeCallbackMustBeItsAttemptsRedirect() throws {
        let world = try ProviderWorld()
        let rpc = try world.h.rpc()
        let (attempt, url) = try world.start("com.example.chatscheme")
        let id = try #require(attempt["attemptId"]?.stringValue)
        let genuine = try world.provider.authorize(url)
        #expect(genuine.hasPrefix("com.example.chat:/callback?"))
        let query = String(genuine.drop { $0 != "?" })
        let refused: [(what: String, url: String, code: String)] = [
            ("another path", "com.example.chat:/callback2" + query, "CALLBACK_MISMATCH"),
            ("an authority", "com.example.chat://callback" + query, "CALLBACK_MISMATCH"),
            ("a loopback redirect", "http://127.0.0.1:8765/callback" + query, "CALLBACK_MISMATCH"),
            ("no iss", CallbackURL.replacing(genuine, "iss", with: nil), "CALLBACK_INVALID"),
            (
                "another issuer", CallbackURL.replacing(genuine, "iss", with: percentEncode("https://evil.example/o")),
                "ISSUER_MISMATCH"
            ),
        ]
        for forged in refused {
            #expect(
                try errorCode(rpc, "login.finish", ["url": .string(forged.url)]) == forged.code, "\(forged.what)")
            #expect(try attemptState(rpc, id) == "waiting", "after \(forged.what)")
        }
        let finished = try rpc.call("login.finish", params: ["url": .string(genuine)])
        #expect(finished["state"] == "completed")
        #expect(try world.session("com.example.chatscheme")["status"] == "signedIn")
        let tokens = try world.provider.tokenCounts()
        // Delivered again (a second click on the link): answered, nothing sent.
        let again = try rpc.call("login.finish", params: ["url": .string(genuine)])
        #expect(again["state"] == "completed")
        let after = try world.provider.tokenCounts()
        #expect(after.access == tokens.access && after.refresh == tokens.refresh)
    }

    /// A code is exchanged once: the completing callback delivered again is
    /// answered from the attempt and sends nothing; another attempt given the
    /// spent code is refused by the provider (`invalid_grant`; Glewlwyd:
    /// `403 invalid_code`) and fails — at both real providers.
    @Test(arguments: TestProvider.Kind.runnable)
    func aReplayedCodeIsNeverExchangedAgain(_ kind: TestProvider.Kind) throws {
        let world = try ProviderWorld(kind)
        let rpc = try world.h.rpc()
        let (attempt, url) = try world.start()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let delivered = try world.provider.authorizeDelivering(url, deliver: true)
        #expect(delivered.deliveryStatus?.contains("200") == true, "\(delivered)")
        #expect(try attemptState(rpc, id) == "completed")
        let tokens = try world.provider.tokenCounts()
        #expect(tokens.access == 1)

        let again = try rpc.call("login.finish", params: ["url": .string(delivered.redirect)])
        #expect(again["attemptId"]?.stringValue == id)
        #expect(again["state"] == "completed")
        #expect(again["session"]?["status"] == "signedIn")
        let after = try world.provider.tokenCounts()
        #expect(after.access == tokens.access && after.refresh == tokens.refresh, "nothing was sent: \(after)")
        // The listener closes with its attempt: a browser can no longer deliver it.
        try waitUntil(10, "the loopback listener to close") { (try? world.provider.get(delivered.redirect)) == nil }

        // A second attempt given the first attempt's (spent) code with its own state.
        let second = try rpc.call(
            "login.start", params: ["client": "com.example.chat", "openBrowser": false, "switchAccount": true])
        let secondURL = try #require(second["authorizeUrl"]?.stringValue)
        let secondId = try #require(second["attemptId"]?.stringValue)
        let redirectURI = try #require(CallbackURL.value(secondURL, "redirect_uri")?.removingPercentEncoding)
        let secondState = try #require(CallbackURL.value(secondURL, "state"))
        let spentCode = try #require(CallbackURL.value(delivered.redirect, "code"))
        let replayed =
            "\(redirectURI)?code=\(spentCode)&state=\(secondState)&iss=\(percentEncode(world.provider.issuer))"
        let failure = try rpcFailure(rpc, "login.finish", ["url": .string(replayed)])
        #expect(failure.applicationCode == "PROVIDER_ERROR", "\(failure)")
        let refusal = kind == .glewlwyd ? "invalid_code" : "invalid_grant"
        #expect(failure.data?["providerError"] == .string(refusal))
        let status = try rpc.call("login.status", params: ["attemptId": .string(secondId)])
        #expect(status["state"] == "failed")
        #expect(status["error"]?["code"] == "PROVIDER_ERROR")
        #expect(status["error"]?["serverCode"] == .string(refusal))
        // switchAccount signed the first session out; the spent code signed no one in.
        let session = try world.session()
        #expect(session["status"] != "signedIn", "\(session)")
    }

    /// The user declines at the provider. DOT's error redirect has no `iss`
    /// although its metadata promises one (issue 31): an error callback with
    /// the right `state` and no `iss` ends the attempt `denied` (it can only
    /// end it, never exchange — OAUTH.md §2); a wrong `iss` is still refused.
    @Test func accessDeniedAtTheProvider() throws {
        let world = try ProviderWorld()
        let rpc = try world.h.rpc()
        let (attempt, url) = try world.start()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let denied = try world.provider.authorize(url, deny: true)
        #expect(CallbackURL.value(denied, "error") == "access_denied")
        #expect(CallbackURL.value(denied, "iss") == nil)

        let wrongIssuer = denied + "&iss=" + percentEncode("http://127.0.0.1:1/o")
        #expect(try errorCode(rpc, "login.finish", ["url": .string(wrongIssuer)]) == "ISSUER_MISMATCH")
        #expect(try attemptState(rpc, id) == "waiting")

        #expect(try errorCode(rpc, "login.finish", ["url": .string(denied)]) == "ACCESS_DENIED")
        let status = try rpc.call("login.status", params: ["attemptId": .string(id)])
        #expect(status["state"] == "denied")
        #expect(status["error"]?["code"] == "ACCESS_DENIED")
        // Ended: the same callback again changes nothing.
        let compliant = denied + "&iss=" + percentEncode(world.provider.issuer)
        #expect(try errorCode(rpc, "login.finish", ["url": .string(compliant)]) == "ATTEMPT_NOT_WAITING")
        #expect(try world.session()["status"] != "signedIn")

        // Any other error ends the attempt `failed` with the provider's words as
        // plain text — without the `iss` DOT promises, too (issue 31).
        let (next, nextURL) = try world.start()
        let nextId = try #require(next["attemptId"]?.stringValue)
        let redirectURI = try #require(CallbackURL.value(nextURL, "redirect_uri")?.removingPercentEncoding)
        let nextState = try #require(CallbackURL.value(nextURL, "state"))
        let refusal =
            "\(redirectURI)?error=invalid_scope&error_description=see%20https%3A%2F%2Fevil.example%2Fhelp&state=\(nextState)"
        let failure = try rpcFailure(rpc, "login.finish", ["url": .string(refusal)])
        #expect(failure.applicationCode == "PROVIDER_ERROR")
        #expect(failure.data?["providerError"] == "invalid_scope")
        #expect(!failure.message.contains("evil.example"), "\(failure.message)")
        let nextStatus = try rpc.call("login.status", params: ["attemptId": .string(nextId)])
        #expect(nextStatus["state"] == "failed")
        #expect(nextStatus["error"]?["serverCode"] == "invalid_scope")
    }

    /// ID tokens that fail OpenID Connect Core §3.1.3.7 behind a proxy in
    /// front of the token endpoint: each attempt ends `failed` with
    /// `ID_TOKEN_INVALID` (the message says which check), nothing is kept,
    /// and the tokens the provider issued are revoked there — at both real providers.
    @Test(arguments: TestProvider.Kind.runnable)
    func forgedIDTokensSignNoOneIn(_ kind: TestProvider.Kind) throws {
        var proxy: TokenProxy?
        let world = try ProviderWorld(kind) { h, provider in
            let started = try TokenProxy(
                dir: h.dir + "/token-proxy", upstreamPort: provider.port, signingKey: provider.signingKeyFile,
                tokenPath: provider.tokenPath)
            proxy = started
            return "TokenEndpoint=\(started.tokenEndpoint)"
        }
        let tampering = try #require(proxy)
        let rpc = try world.h.rpc()
        let forgeries = TokenProxy.forgeries
        for (index, forgery) in forgeries.enumerated() {
            tampering.mode = forgery.mode
            let (attempt, url) = try world.start()
            let id = try #require(attempt["attemptId"]?.stringValue)
            let redirect = try world.provider.authorize(url)
            let failure = try rpcFailure(rpc, "login.finish", ["url": .string(redirect)])
            #expect(failure.applicationCode == "ID_TOKEN_INVALID", "\(forgery.mode): \(failure)")
            #expect(failure.message.contains(forgery.says), "\(forgery.mode): \(failure.message)")
            #expect(tampering.tokenRequests == index + 1, "\(forgery.mode): one exchange")
            let status = try rpc.call("login.status", params: ["attemptId": .string(id)])
            #expect(status["state"] == "failed", "\(forgery.mode)")
            #expect(status["error"]?["code"] == "ID_TOKEN_INVALID", "\(forgery.mode)")
            #expect(try world.session()["status"] != "signedIn", "\(forgery.mode)")
            // Revoked at the provider (best effort, before the answer): no live token of alice's
            // (Glewlwyd's access tokens are JWTs that live on until they expire: its refresh tokens).
            let counts = try world.provider.tokenCounts()
            #expect(counts.refresh == 0, "\(forgery.mode): \(counts)")
            if kind == .djangoOAuthToolkit { #expect(counts.access == 0, "\(forgery.mode): \(counts)") }
        }
        // The same path with the ID token untouched signs in.
        tampering.mode = "pass"
        let (_, url) = try world.start()
        let finished = try rpc.call("login.finish", params: ["url": .string(try world.provider.authorize(url))])
        #expect(finished["state"] == "completed")
        #expect(tampering.tokenRequests == forgeries.count + 1)
        #expect(try world.session()["status"] == "signedIn")
    }

    /// An exchange without a definite answer (the connection closed after
    /// the request, or a 502) ends the attempt `failed` with
    /// `EXCHANGE_UNCERTAIN`, and the code is never sent again — not even
    /// when the callback is delivered again.
    @Test(arguments: ["drop-after", "502"])
    func anExchangeWithoutADefiniteAnswerIsNeverResent(_ mode: String) throws {
        var proxy: TokenProxy?
        let world = try ProviderWorld { h, provider in
            let started = try TokenProxy(
                dir: h.dir + "/token-proxy", upstreamPort: provider.port, signingKey: provider.directory + "/oidc-rsa.pem")
            proxy = started
            return "TokenEndpoint=\(started.tokenEndpoint)"
        }
        let tampering = try #require(proxy)
        tampering.mode = mode
        let rpc = try world.h.rpc()
        let (attempt, url) = try world.start()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let redirect = try world.provider.authorize(url)
        #expect(try errorCode(rpc, "login.finish", ["url": .string(redirect)]) == "EXCHANGE_UNCERTAIN")
        #expect(tampering.tokenRequests == 1)
        let status = try rpc.call("login.status", params: ["attemptId": .string(id)])
        #expect(status["state"] == "failed")
        #expect(status["error"]?["code"] == "EXCHANGE_UNCERTAIN")

        // Delivered again, even once the provider answers: refused, nothing sent.
        tampering.mode = "pass"
        #expect(try errorCode(rpc, "login.finish", ["url": .string(redirect)]) == "ATTEMPT_NOT_WAITING")
        #expect(try attemptState(rpc, id) == "failed")
        #expect(tampering.tokenRequests == 1, "the exchange was never re-sent")
        #expect(try world.session()["status"] != "signedIn")
    }
}

/// Literal edits of a callback or authorize URL's query (no re-encoding of
/// the other parameters).
enum CallbackURL {
    /// The raw (still percent-encoded) value of `name`, nil when absent.
    static func value(_ url: String, _ name: String) -> String? {
        guard let query = URLParts(splitting: url)?.query else { return nil }
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            if parts.first == Substring(name) { return parts.count > 1 ? String(parts[1]) : "" }
        }
        return nil
    }

    /// `url` with the value of `name` replaced by `value` (written as is), or the parameter removed (nil).
    static func replacing(_ url: String, _ name: String, with value: String?) -> String {
        guard let question = url.firstIndex(of: "?") else { return url }
        let head = url[..<question]
        let pairs = url[url.index(after: question)...].split(separator: "&").compactMap { pair -> String? in
            guard pair.split(separator: "=", maxSplits: 1).first == Substring(name) else { return String(pair) }
            return value.map { name + "=" + $0 }
        }
        return head + "?" + pairs.joined(separator: "&")
    }

    /// `url` with the port of its authority replaced.
    static func replacingPort(_ url: String, with port: Int) -> String {
        guard let parts = URLParts(splitting: url), let authority = parts.authority, let old = parts.portText else {
            return url
        }
        let replaced = String(authority.dropLast(old.count)) + "\(port)"
        return url.replacingOccurrences(of: "//" + authority + "/", with: "//" + replaced + "/")
    }
}

/// A proxy in front of the provider's token endpoint (the client file's
/// `TokenEndpoint=` points at it) that counts the token requests it receives
/// and, by `mode`, passes them on or tampers with the answer:
/// - `pass`: forwarded as is;
/// - `bad-signature`: the ID token's signature altered;
/// - `foreign-key`: the ID token re-signed (RS256, the provider's key id) with a key of the proxy's own;
/// - `other-nonce`, `other-audience`: a claim changed, re-signed with the provider's own key;
/// - `alg-none`: the ID token made unsigned (`alg: none`);
/// - `no-id-token`: the ID token removed from the answer;
/// - `drop-after`: forwarded, then the connection closed without an answer;
/// - `502`: a 502, not forwarded.
/// It runs on the provider's Python (which has `cryptography`) and ends with the test.
final class TokenProxy {
    /// The modes that forge the ID token, each with what the refusal names.
    static let forgeries: [(mode: String, says: String)] = [
        ("bad-signature", "signature does not verify"),
        ("foreign-key", "signature does not verify"),
        ("other-nonce", "nonce"),
        ("alg-none", "algorithm"),
        ("other-audience", "aud"),
        ("no-id-token", "no ID token"),
    ]

    let dir: String
    private let child: Child
    private(set) var port = 0

    static let script = #"""
        import base64, http.client, http.server, json, os, sys, threading

        state_dir, upstream_port, key_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
        lock = threading.Lock()

        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding, rsa

        with open(key_path, 'rb') as f:
            provider_key = serialization.load_pem_private_key(f.read(), password=None)
        own_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

        def b64d(text):
            return base64.urlsafe_b64decode(text + '=' * (-len(text) % 4))

        def b64e(data):
            return base64.urlsafe_b64encode(data).rstrip(b'=').decode()

        def signed(header, payload, key):
            signing_input = b64e(json.dumps(header).encode()) + '.' + b64e(json.dumps(payload).encode())
            signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
            return signing_input + '.' + b64e(signature)

        def tamper(token, mode):
            h, p, s = token.split('.')
            header, payload = json.loads(b64d(h)), json.loads(b64d(p))
            if mode == 'bad-signature':
                signature = bytearray(b64d(s))
                signature[len(signature) // 2] ^= 0x01
                return h + '.' + p + '.' + b64e(bytes(signature))
            if mode == 'foreign-key':
                return signed(header, payload, own_key)
            if mode == 'other-nonce':
                payload['nonce'] = 'not-the-nonce-of-this-sign-in'
                return signed(header, payload, provider_key)
            if mode == 'other-audience':
                payload['aud'] = 'another-client'
                return signed(header, payload, provider_key)
            if mode == 'alg-none':
                return b64e(json.dumps({'alg': 'none', 'typ': 'JWT'}).encode()) + '.' + p + '.'
            return token

        def mode_now():
            try:
                with open(os.path.join(state_dir, 'mode')) as f:
                    return f.read().strip() or 'pass'
            except OSError:
                return 'pass'

        def count():
            with lock:
                path = os.path.join(state_dir, 'count')
                try:
                    with open(path) as f:
                        n = int(f.read())
                except (OSError, ValueError):
                    n = 0
                with open(path + '.tmp', 'w') as f:
                    f.write(str(n + 1))
                os.replace(path + '.tmp', path)

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'

            def log_message(self, fmt, *args):
                sys.stderr.write('token-proxy: ' + (fmt % args) + '\n')

            def do_POST(self):
                length = int(self.headers.get('Content-Length') or 0)
                body = self.rfile.read(length) if length else b''
                mode = mode_now()
                count()
                self.close_connection = True
                sys.stderr.write('token-proxy: POST %s (%s)\n' % (self.path, mode))
                if mode == '502':
                    return self.reply(502, 'text/plain', b'bad gateway')
                status, content_type, data = self.forward(body)
                if mode == 'drop-after':
                    self.connection.close()
                    return
                if status == 200 and mode != 'pass':
                    answer = json.loads(data)
                    if mode == 'no-id-token':
                        answer.pop('id_token', None)
                    elif 'id_token' in answer:
                        answer['id_token'] = tamper(answer['id_token'], mode)
                    data = json.dumps(answer).encode()
                self.reply(status, content_type, data)

            def forward(self, body):
                conn = http.client.HTTPConnection('127.0.0.1', upstream_port, timeout=60)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ('host', 'connection', 'content-length')}
                headers['Host'] = '127.0.0.1:%d' % upstream_port
                conn.request('POST', self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                content_type = resp.getheader('Content-Type') or 'application/json'
                conn.close()
                return resp.status, content_type, data

            def reply(self, status, content_type, data):
                self.send_response(status)
                self.send_header('Content-Type', content_type)
                self.send_header('Cache-Control', 'no-store')
                self.send_header('Content-Length', str(len(data)))
                self.send_header('Connection', 'close')
                self.end_headers()
                self.wfile.write(data)

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

        server = Server(('127.0.0.1', 0), Handler)
        ready = os.path.join(state_dir, 'ready')
        with open(ready + '.tmp', 'w') as f:
            f.write(str(server.server_address[1]))
        os.replace(ready + '.tmp', ready)
        server.serve_forever()
        """#

    /// The provider's token endpoint path, which the proxy answers on.
    let tokenPath: String

    init(dir: String, upstreamPort: Int, signingKey: String, tokenPath: String = "/o/token/") throws {
        self.dir = dir
        self.tokenPath = tokenPath
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: dir + "/proxy.py", contents: Data(Self.script.utf8))
        child = try Child(
            TestProvider.virtualEnvironment + "/bin/python", ["-u", dir + "/proxy.py", dir, "\(upstreamPort)", signingKey],
            environment: ProcessInfo.processInfo.environment, log: dir + "/proxy.log")
        try waitUntil(30, "the token proxy to listen") { [child] in
            guard child.isRunning else { throw HarnessError("the token proxy exited:\n\(child.output)", fatal: true) }
            return FileManager.default.fileExists(atPath: dir + "/ready")
        }
        port = Int((try? String(contentsOfFile: dir + "/ready", encoding: .utf8)) ?? "") ?? 0
    }

    deinit { child.stop() }

    var tokenEndpoint: String { "http://127.0.0.1:\(port)" + tokenPath }

    /// How the next token requests are answered (replaced atomically).
    var mode: String {
        get { (try? String(contentsOfFile: dir + "/mode", encoding: .utf8)) ?? "pass" }
        set {
            _ = FileManager.default.createFile(atPath: dir + "/mode.tmp", contents: Data(newValue.utf8))
            rename(dir + "/mode.tmp", dir + "/mode")
        }
    }

    /// The token requests received so far (whatever the mode).
    var tokenRequests: Int {
        Int((try? String(contentsOfFile: dir + "/count", encoding: .utf8)) ?? "") ?? 0
    }
}

extension TestProvider {
    /// The key the provider signs its ID tokens with (the token proxy re-signs with it).
    var signingKeyFile: String { directory + (kind == .glewlwyd ? "/signing-key.pem" : "/oidc-rsa.pem") }
    /// The path of the provider's token endpoint.
    var tokenPath: String { kind == .glewlwyd ? "/api/o/token/" : "/o/token/" }
}
