@_exported import BrowserLoginAPI
import BrowserLoginProtocol

// The wire-visible types (views, states, error codes) live in BrowserLoginAPI;
// re-exported so that every BrokerCore user sees them.

extension AttemptView {
    public init(_ record: AttemptRecord) {
        self.init(
            attemptId: record.id, client: record.client, state: record.state, createdAt: record.createdAt,
            expiresAt: record.expiresAt, updatedAt: record.updatedAt,
            error: record.error.map { ErrorView(code: $0.code, message: $0.message, serverCode: $0.serverCode) },
            receipt: record.receiptIssuedAt.map {
                ReceiptView(issuedAt: $0, sessionExpiresAt: record.receiptSessionExpiresAt)
            },
            reconciled: record.state == .uncertain ? record.resolution != .none : true)
        // The return URL the attempt registered says how the browser comes back (docs/desktop.md).
        if let scheme = URLParts(splitting: record.returnURL)?.scheme.lowercased() {
            returnVia = scheme == "http" ? "loopback" : "scheme"
        }
    }
}
