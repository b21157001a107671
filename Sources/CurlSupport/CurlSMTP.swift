import CCurl

/// How an SMTP submission protects its connection.
public enum CurlSMTPSecurity: Sendable, Equatable {
    /// `smtp://`: the session must switch to TLS with STARTTLS before
    /// anything else is sent; a server that does not offer it is refused.
    case startTLS
    /// `smtps://`: TLS from the first byte (implicit TLS, RFC 8314).
    case implicitTLS
    /// No TLS: only for a loopback test server (the caller enforces that).
    case none
}

/// One message to submit over SMTP (RFC 5321) with libcurl.
public struct CurlSMTPRequest: Sendable {
    /// `smtp://host[:port]` or `smtps://host[:port]`.
    public var url: String
    public var security: CurlSMTPSecurity
    /// SMTP AUTH (libcurl picks the strongest mechanism both sides know); nil: no AUTH.
    public var username: String?
    public var password: String?
    /// The envelope sender (`MAIL FROM`), a bare address.
    public var from: String
    /// The envelope recipients (`RCPT TO`), bare addresses.
    public var recipients: [String]
    /// The whole message (headers, blank line, body), CRLF line ends. libcurl
    /// dot-stuffs lines that start with a dot.
    public var message: [UInt8]
    /// A PEM file of CAs to trust instead of the system's.
    public var caFile: String?
    public var timeoutMilliseconds: Int

    public init(
        url: String, security: CurlSMTPSecurity, username: String? = nil, password: String? = nil, from: String,
        recipients: [String], message: [UInt8], caFile: String? = nil, timeoutMilliseconds: Int = 30_000
    ) {
        self.url = url
        self.security = security
        self.username = username
        self.password = password
        self.from = from
        self.recipients = recipients
        self.message = message
        self.caFile = caFile
        self.timeoutMilliseconds = timeoutMilliseconds
    }
}

/// Why a submission failed: libcurl's code and its generic text (never the
/// message, the password or the server's free text).
public struct CurlSMTPError: Error, Sendable, CustomStringConvertible {
    public var code: CURLcode
    public var reason: String

    public var description: String { "\(reason) (libcurl \(code.rawValue): \(curlText(code)))" }

    init(_ code: CURLcode) {
        self.code = code
        switch code {
        case CURLE_LOGIN_DENIED: reason = "the SMTP server refused the user name or password"
        case CURLE_USE_SSL_FAILED: reason = "the SMTP server does not offer STARTTLS"
        case CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE:
            reason = "the SMTP server's TLS certificate is not trusted or does not name its host"
        case CURLE_SSL_CONNECT_ERROR: reason = "the TLS handshake with the SMTP server failed"
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_OPERATION_TIMEDOUT:
            reason = "the SMTP server cannot be reached"
        case CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_GOT_NOTHING: reason = "the connection to the SMTP server broke"
        default: reason = "the SMTP server refused the message"
        }
    }
}

/// Submits messages over SMTP, one connection per message.
public enum CurlSMTP {
    /// Sends `request` on the calling thread; throws `CurlSMTPError` when the
    /// server did not accept the message for every recipient.
    public static func send(_ request: CurlSMTPRequest) throws(CurlSMTPError) {
        guard curlGlobalInit == CURLE_OK, let handle = curl_easy_init() else { throw CurlSMTPError(CURLE_FAILED_INIT) }
        defer { curl_easy_cleanup(handle) }
        let source = UploadSource(request.message)
        var recipients: UnsafeMutablePointer<curl_slist>? = nil
        defer { curl_slist_free_all(recipients) }
        func set(_ option: CURLoption, _ value: Int) -> Bool { bl_curl_setopt_long(handle, option, value) == CURLE_OK }
        func set(_ option: CURLoption, _ value: String) -> Bool {
            bl_curl_setopt_string(handle, option, value) == CURLE_OK
        }
        var ok =
            set(CURLOPT_URL, request.url)
            && set(CURLOPT_PROTOCOLS_STR, request.security == .implicitTLS ? "smtps" : "smtp")
            && set(CURLOPT_NOSIGNAL, 1)
            && set(CURLOPT_PROXY, "")
            && set(CURLOPT_TIMEOUT_MS, request.timeoutMilliseconds)
            && set(CURLOPT_CONNECTTIMEOUT_MS, min(10_000, request.timeoutMilliseconds))
            && set(CURLOPT_SSL_VERIFYPEER, 1)
            && set(CURLOPT_SSL_VERIFYHOST, 2)
            && set(CURLOPT_SSLVERSION, CURL_SSLVERSION_TLSv1_2)
            && set(CURLOPT_USE_SSL, Int(request.security == .none ? CURLUSESSL_NONE.rawValue : CURLUSESSL_ALL.rawValue))
            && set(CURLOPT_MAIL_FROM, "<" + request.from + ">")
            && set(CURLOPT_UPLOAD, 1)
            && bl_curl_setopt_off(handle, CURLOPT_INFILESIZE_LARGE, curl_off_t(request.message.count)) == CURLE_OK
            && bl_curl_setopt_writefn(handle, CURLOPT_READFUNCTION, readCallback) == CURLE_OK
            && bl_curl_setopt_pointer(handle, CURLOPT_READDATA, Unmanaged.passUnretained(source).toOpaque())
                == CURLE_OK
        if let caFile = request.caFile { ok = ok && set(CURLOPT_CAINFO, caFile) }
        if let username = request.username {
            ok = ok && set(CURLOPT_USERNAME, username) && set(CURLOPT_PASSWORD, request.password ?? "")
        }
        for recipient in request.recipients {
            guard let next = curl_slist_append(recipients, "<" + recipient + ">") else {
                throw CurlSMTPError(CURLE_OUT_OF_MEMORY)
            }
            recipients = next
        }
        ok = ok && bl_curl_setopt_slist(handle, CURLOPT_MAIL_RCPT, recipients) == CURLE_OK
        guard ok else { throw CurlSMTPError(CURLE_BAD_FUNCTION_ARGUMENT) }
        let code = withExtendedLifetime(source) { curl_easy_perform(handle) }
        _ = bl_curl_setopt_pointer(handle, CURLOPT_READDATA, nil)
        guard code == CURLE_OK else { throw CurlSMTPError(code) }
    }
}

/// The message being uploaded; the read callback reaches it through its pointer.
private final class UploadSource {
    let bytes: [UInt8]
    var offset = 0
    init(_ bytes: [UInt8]) { self.bytes = bytes }
}

private let readCallback: bl_curl_write_callback = { buffer, size, count, user in
    guard let buffer, let user else { return 0 }
    let source = Unmanaged<UploadSource>.fromOpaque(user).takeUnretainedValue()
    let take = min(size * count, source.bytes.count - source.offset)
    guard take > 0 else { return 0 }
    source.bytes.withUnsafeBufferPointer { all in
        UnsafeMutableRawPointer(buffer).copyMemory(from: all.baseAddress! + source.offset, byteCount: take)
    }
    source.offset += take
    return take
}
