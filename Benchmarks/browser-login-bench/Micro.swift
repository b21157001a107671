import BrokerRPC
import BrowserLoginTestSupport
import Foundation

/// `--micro`: the per-message CPU cost of the RPC server's steps, in-process.
enum Micro {
    static func run() {
        let line = Array(
            #"{"jsonrpc":"2.0","id":1,"method":"session.get","params":{"client":"com.example.bencha"}}"#.utf8)
        let result = Array(#"{"account":{"displayName":"ada","email":"ada@example.com"},"status":"signedIn"}"#.utf8)
        func time(_ name: String, _ n: Int = 200_000, _ body: () -> Void) {
            for _ in 0..<1000 { body() }
            let t = nowNanos()
            for _ in 0..<n { body() }
            print(String(format: "micro: %-28@ %8.0f ns", name as NSString, Double(nowNanos() - t) / Double(n)))
        }
        var sink = 0
        time("frame decode") {
            var d = RPCFrameDecoder()
            sink &+= d.feed(line + [10]).count
        }
        time("JSONValue.parse") { sink &+= (try? JSONValue.parse(line)) == nil ? 0 : 1 }
        time("decodeIncoming") {
            if case .single = RPCCodec.decodeIncoming(line) { sink &+= 1 }
        }
        time("encode reply") { sink &+= RPCCodec.encode(id: .integer(1), serializedResult: result).count }
        print("micro: (sink \(sink))")
    }
}
