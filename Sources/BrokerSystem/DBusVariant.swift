import BrokerRPC
import CGIO

/// JSON values to and from GVariants, for the broker's D-Bus API
/// (docs/dbus.md): views go out as `a{sv}` dictionaries with their null
/// members left out, options come in as `a{sv}` and become JSON params.
///
/// Out, by the D-Bus type asked for: `s`, `b`, `x`, `d`, `v`, `as`, `a{ss}`,
/// `a{sv}`, `aa{sv}`, `av`. Inside a `v` (a member of an `a{sv}`), the type
/// follows the value: object `a{sv}`, string `s`, bool `b`, integer `x`,
/// double `d`, a list of objects `aa{sv}`, a list of strings `as`, any other
/// list `av`.
///
/// In: `s`, `o` and `g` are strings, `b` a bool, every integer type an
/// integer, `d` a double, `v` its content; dictionaries with string keys
/// are objects, any other array a list. Anything else (tuples, byte
/// strings that are not text) is not read.
public enum DBusVariant {
    /// A new floating GVariant of `type` holding `value`; nil when the value
    /// does not fit the type (or holds a string with a NUL, which D-Bus cannot
    /// carry). `memberTypes` gives the type of some members of a top-level
    /// `a{sv}` (an HTTP response's `headers` as `a{ss}`).
    public static func make(_ value: JSONValue, type: String, memberTypes: [String: String] = [:]) -> OpaquePointer? {
        switch (type, value) {
        case ("s", .string(let s)):
            return s.utf8.contains(0) ? nil : g_variant_new_string(s)
        case ("b", .bool(let b)): return g_variant_new_boolean(b ? 1 : 0)
        case ("x", .integer(let i)): return g_variant_new_int64(gint64(i))
        case ("d", .double(let d)): return g_variant_new_double(d)
        case ("d", .integer(let i)): return g_variant_new_double(Double(i))
        case ("v", _):
            guard let inner = natural(value) else { return nil }
            return g_variant_new_variant(inner)
        case ("a{sv}", .object(let members)):
            var entries: [OpaquePointer] = []
            for name in members.keys.sorted() {
                guard let member = members[name], member != .null else { continue }
                let inner = memberTypes[name].map { make(member, type: $0) } ?? natural(member)
                guard let inner, let key = make(.string(name), type: "s") else { return sink(entries) }
                entries.append(g_variant_new_dict_entry(key, g_variant_new_variant(inner)))
            }
            return array(of: "{sv}", entries)
        case ("a{ss}", .object(let members)):
            var entries: [OpaquePointer] = []
            for name in members.keys.sorted() {
                guard let key = make(.string(name), type: "s"), let text = members[name].flatMap({ make($0, type: "s") })
                else { return sink(entries) }
                entries.append(g_variant_new_dict_entry(key, text))
            }
            return array(of: "{ss}", entries)
        case (_, .array(let items)) where type.hasPrefix("a") && !type.hasPrefix("a{"):
            let itemType = String(type.dropFirst())
            var children: [OpaquePointer] = []
            for item in items {
                guard let child = make(item, type: itemType) else { return sink(children) }
                children.append(child)
            }
            return array(of: itemType, children)
        default:
            return nil
        }
    }

    /// The D-Bus type a value takes inside a `v`; nil for null.
    public static func naturalType(_ value: JSONValue) -> String? {
        switch value {
        case .null: return nil
        case .bool: return "b"
        case .integer: return "x"
        case .double: return "d"
        case .string: return "s"
        case .object: return "a{sv}"
        case .array(let items):
            if !items.isEmpty, items.allSatisfy({ $0.objectValue != nil }) { return "aa{sv}" }
            if !items.isEmpty, items.allSatisfy({ $0.stringValue != nil }) { return "as" }
            return "av"
        }
    }

    private static func natural(_ value: JSONValue) -> OpaquePointer? {
        naturalType(value).flatMap { make(value, type: $0) }
    }

    /// An array of `children` (floating, consumed), typed so that an empty one has its type too.
    private static func array(of itemType: String, _ children: [OpaquePointer]) -> OpaquePointer? {
        guard let type = g_variant_type_new(itemType) else { return sink(children) }
        defer { g_variant_type_free(type) }
        return children.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: OpaquePointer?.self) { g_variant_new_array(type, $0.baseAddress, gsize(buffer.count)) }
        }
    }

    /// Frees floating children built before a member that does not fit; answers nil.
    private static func sink(_ children: [OpaquePointer]) -> OpaquePointer? {
        for child in children { g_variant_unref(g_variant_ref_sink(child)) }
        return nil
    }

    /// The strings of `tuple`'s member `index` (not consumed), an array of
    /// strings (`as`, `ao`); empty when it is not one.
    public static func strings(_ tuple: OpaquePointer, at index: gsize) -> [String] {
        guard index < g_variant_n_children(tuple), let list = g_variant_get_child_value(tuple, index) else { return [] }
        defer { g_variant_unref(list) }
        guard let type = g_variant_get_type_string(list), ["as", "ao"].contains(String(cString: type)) else { return [] }
        var strings: [String] = []
        for i in 0..<g_variant_n_children(list) {
            guard let child = g_variant_get_child_value(list, i) else { continue }
            if let text = g_variant_get_string(child, nil) { strings.append(String(cString: text)) }
            g_variant_unref(child)
        }
        return strings
    }

    /// The JSON value of a GVariant (not consumed); nil for the types D-Bus options never take here.
    public static func json(_ variant: OpaquePointer) -> JSONValue? {
        let type = String(cString: g_variant_get_type_string(variant))
        switch type {
        case "s", "o", "g": return .string(String(cString: g_variant_get_string(variant, nil)))
        case "b": return .bool(g_variant_get_boolean(variant) != 0)
        case "y": return .integer(Int64(g_variant_get_byte(variant)))
        case "n": return .integer(Int64(g_variant_get_int16(variant)))
        case "q": return .integer(Int64(g_variant_get_uint16(variant)))
        case "i", "h": return .integer(Int64(g_variant_get_int32(variant)))
        case "u": return .integer(Int64(g_variant_get_uint32(variant)))
        case "x": return .integer(Int64(g_variant_get_int64(variant)))
        case "t":
            let value = g_variant_get_uint64(variant)
            return value <= UInt64(Int64.max) ? .integer(Int64(value)) : nil
        case "d": return .double(g_variant_get_double(variant))
        case "v":
            guard let inner = g_variant_get_variant(variant) else { return nil }
            defer { g_variant_unref(inner) }
            return json(inner)
        case _ where type.hasPrefix("a{s") || type.hasPrefix("a{o"):
            var members: [String: JSONValue] = [:]
            for i in 0..<g_variant_n_children(variant) {
                guard let entry = g_variant_get_child_value(variant, i) else { return nil }
                defer { g_variant_unref(entry) }
                guard let key = g_variant_get_child_value(entry, 0), let value = g_variant_get_child_value(entry, 1)
                else { return nil }
                defer {
                    g_variant_unref(key)
                    g_variant_unref(value)
                }
                guard case .string(let name)? = json(key), let member = json(value) else { return nil }
                members[name] = member
            }
            return .object(members)
        case _ where type.hasPrefix("a") && !type.hasPrefix("a{"):
            var items: [JSONValue] = []
            for i in 0..<g_variant_n_children(variant) {
                guard let child = g_variant_get_child_value(variant, i) else { return nil }
                defer { g_variant_unref(child) }
                guard let item = json(child) else { return nil }
                items.append(item)
            }
            return .array(items)
        default:
            return nil
        }
    }

    /// `value` made as `type`, in GVariant's text form (`g_variant_print`, with types); for tests and tools.
    public static func text(_ value: JSONValue, type: String, memberTypes: [String: String] = [:]) -> String? {
        guard let made = make(value, type: type, memberTypes: memberTypes) else { return nil }
        let variant = g_variant_ref_sink(made)
        defer { g_variant_unref(variant) }
        guard let text = g_variant_print(variant, 1) else { return nil }
        defer { g_free(text) }
        return String(cString: text)
    }

    /// The JSON value of a GVariant in text form (`g_variant_parse`); for tests and tools.
    public static func json(text: String, type: String? = nil) -> JSONValue? {
        let variantType = type.flatMap { g_variant_type_new($0) }
        defer { variantType.map { g_variant_type_free($0) } }
        guard let parsed = g_variant_parse(variantType, text, nil, nil, nil) else { return nil }
        let variant = g_variant_ref_sink(parsed)
        defer { g_variant_unref(variant) }
        return variant.flatMap { json($0) }
    }
}
