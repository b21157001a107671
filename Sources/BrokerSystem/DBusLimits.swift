import BrokerRPC
import CGIO

/// The limits a D-Bus call's arguments are judged by before any of them is
/// copied into Swift values — the JSON-RPC API's limits (docs/dbus.md, Limits):
/// the arguments of one call at most 1 MiB as serialized (the largest
/// JSON-RPC message), at most `maximumEntries` entries in any array or
/// dictionary, nested at most `maximumDepth` deep (JSON's bound). A call over
/// them is answered `InvalidArgs` naming the limit, quoting none of its input.
public enum DBusLimits {
    public static let maximumBody = RPCFrameDecoder.defaultMaxMessageSize
    public static let maximumEntries = 1000
    public static let maximumDepth = 32

    /// Why the arguments (the call's parameter tuple) are refused; nil when they are within the limits.
    /// Reads sizes and counts only: no string or container is copied.
    public static func problem(_ parameters: OpaquePointer) -> String? {
        let size = Int(g_variant_get_size(parameters))
        if size > maximumBody {
            return "the call's arguments are \(size) bytes, over the \(maximumBody) bytes (1 MiB) a call may carry"
        }
        for i in 0..<g_variant_n_children(parameters) {
            guard let child = g_variant_get_child_value(parameters, i) else { continue }
            defer { g_variant_unref(child) }
            if let problem = problem(child, depth: 1) { return "argument \(i + 1): \(problem)" }
        }
        return nil
    }

    private static func problem(_ value: OpaquePointer, depth: Int) -> String? {
        guard g_variant_is_container(value) != 0 else { return nil }
        guard depth <= maximumDepth else { return "nested more than \(maximumDepth) deep" }
        let count = g_variant_n_children(value)
        if count > gsize(maximumEntries) {
            return "an array or dictionary of \(count) entries, over the \(maximumEntries) one may hold"
        }
        for i in 0..<count {
            guard let child = g_variant_get_child_value(value, i) else { continue }
            defer { g_variant_unref(child) }
            if let problem = problem(child, depth: depth + 1) { return problem }
        }
        return nil
    }
}
