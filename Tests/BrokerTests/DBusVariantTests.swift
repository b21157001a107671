import BrokerRPC
import BrokerSystem
import Testing

/// JSON values to and from GVariants (DBusVariant), as the D-Bus API
/// (docs/dbus.md) carries views out and options in.
@Suite struct DBusVariantTests {
    func text(_ value: JSONValue, _ type: String, memberTypes: [String: String] = [:]) -> String? {
        DBusVariant.text(value, type: type, memberTypes: memberTypes)
    }

    func json(_ text: String) -> JSONValue? { DBusVariant.json(text: text) }

    @Test func aViewBecomesADictionaryWithoutItsNullMembers() {
        let session: JSONValue = .object([
            "client": "com.example.notes", "status": "signedIn", "reason": .null,
            "account": .object(["email": "ada@example.com", "displayName": .null]),
        ])
        #expect(
            text(session, "a{sv}")
                == "{'account': <{'email': <'ada@example.com'>}>, 'client': <'com.example.notes'>, 'status': <'signedIn'>}"
        )
    }

    @Test func eachJSONTypeTakesItsDBusTypeInsideAVariant() {
        let value: JSONValue = .object([
            "b": true, "x": .integer(-3), "d": .double(1.5), "objects": .array([.object(["a": "1"])]),
            "strings": .array(["p", "q"]), "mixed": .array([.integer(1), "two"]), "empty": .array([]),
        ])
        #expect(
            text(value, "a{sv}")
                == "{'b': <true>, 'd': <1.5>, 'empty': <@av []>, 'mixed': <[<int64 1>, <'two'>]>, 'objects': <[{'a': <'1'>}]>, 'strings': <['p', 'q']>, 'x': <int64 -3>}"
        )
    }

    @Test func anHTTPResponseCarriesItsHeadersAsAStringDictionary() {
        let response: JSONValue = .object([
            "status": .integer(200), "headers": .object(["content-type": "application/json"]), "body": "{}",
        ])
        #expect(
            text(response, "a{sv}", memberTypes: ["headers": "a{ss}"])
                == "{'body': <'{}'>, 'headers': <{'content-type': 'application/json'}>, 'status': <int64 200>}")
    }

    @Test func anEmptyListStillHasItsType() {
        #expect(text(.array([]), "aa{sv}") == "@aa{sv} []")
        #expect(text(.string("x"), "s") == "'x'")
    }

    @Test func whatDoesNotFitIsRefused() {
        #expect(text(.string("a\u{0}b"), "s") == nil)
        #expect(text(.integer(1), "s") == nil)
        #expect(text(.object(["k": .integer(1)]), "a{ss}") == nil)
        #expect(text(.array([.integer(1)]), "as") == nil)
    }

    @Test func optionsBecomeJSONParams() {
        #expect(
            json("{'openBrowser': <true>, 'flow': <'device'>, 'timeoutMs': <uint32 5000>}")
                == .object(["openBrowser": true, "flow": "device", "timeoutMs": .integer(5000)]))
        #expect(json("{'states': <['waiting', 'completed']>}") == .object(["states": .array(["waiting", "completed"])]))
        #expect(json("{'query': <{'limit': '5'}>}") == .object(["query": .object(["limit": "5"])]))
        #expect(
            json("{'n': <byte 7>, 'm': <int16 -2>, 'd': <2.5>, 'p': <objectpath '/a'>}")
                == .object(["n": .integer(7), "m": .integer(-2), "d": .double(2.5), "p": "/a"]))
        #expect(json("<<'nested'>>") == .string("nested"))
    }

    @Test func whatOptionsNeverHoldIsNotRead() {
        #expect(json("uint64 18446744073709551615") == nil)
        #expect(json("('a', 'b')") == nil)
    }
}
