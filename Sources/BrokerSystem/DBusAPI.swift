import BrokerRPC
import CGIO
import Synchronization

/// An API object that `DBusApplication` serves next to
/// `org.freedesktop.Application`, on the same connection: its own bus name,
/// object path and interface. Each call is checked against the in-flight
/// limits, its arguments read as JSON and its caller's credentials fetched
/// (`GetConnectionCredentials`) before `handle` sees it.
public struct DBusAPI: Sendable {
    public var busName: String
    public var objectPath: String
    public var interfaceName: String
    /// The introspection XML of a node holding the interface.
    public var interfaceXML: String
    /// Calls one caller may have unanswered at once; beyond it, `busyError`.
    public var maxCallsPerCaller: Int
    /// Calls unanswered at once, all callers together; beyond it, `busyError`.
    public var maxCalls: Int
    /// The D-Bus error name of a call refused at the limits.
    public var busyError: String
    /// Answers a call, from any thread; must not block (it runs on the D-Bus thread).
    public var handle: @Sendable (DBusMethodCall) -> Void
    /// A unique name left the bus, or (nil) the bus itself went away: every caller is gone.
    public var callerLeft: @Sendable (String?) -> Void
    /// Called on the D-Bus thread as each call arrives, before it is judged (for activity counts).
    public var arrived: @Sendable () -> Void = {}

    public init(
        busName: String, objectPath: String, interfaceName: String, interfaceXML: String, maxCallsPerCaller: Int,
        maxCalls: Int, busyError: String, handle: @escaping @Sendable (DBusMethodCall) -> Void,
        callerLeft: @escaping @Sendable (String?) -> Void
    ) {
        self.busName = busName
        self.objectPath = objectPath
        self.interfaceName = interfaceName
        self.interfaceXML = interfaceXML
        self.maxCallsPerCaller = maxCallsPerCaller
        self.maxCalls = maxCalls
        self.busyError = busyError
        self.handle = handle
        self.callerLeft = callerLeft
    }
}

/// Who made a call: its unique bus name and, from the bus, its process and user.
public struct DBusCaller: Sendable, Hashable {
    public var uniqueName: String
    public var pid: Int32
    public var uid: UInt32
}

/// A D-Bus error reply: a name such as `org.freedesktop.DBus.Error.InvalidArgs` and a message.
public struct DBusError: Error, Sendable, Hashable {
    public var name: String
    public var message: String

    public init(_ name: String, _ message: String) {
        self.name = name
        self.message = message
    }

    public static func invalidArgs(_ message: String) -> DBusError {
        DBusError("org.freedesktop.DBus.Error.InvalidArgs", message)
    }
    public static func failed(_ message: String) -> DBusError { DBusError("org.freedesktop.DBus.Error.Failed", message) }
}

/// One method call of a `DBusAPI`, answered exactly once with `reply` or
/// `fail` (a call dropped unanswered is answered `Failed`).
public final class DBusMethodCall: @unchecked Sendable {
    // Safe: every member is immutable except `answered`, an atomic that makes
    // sure the invocation (whose reference the answer consumes) is answered
    // once; GDBus allows answering an invocation from any thread.
    public let method: String
    public let arguments: [JSONValue]
    public let caller: DBusCaller
    private let invocation: OpaquePointer
    private let outTypes: [String]
    private let answered = Atomic<Bool>(false)
    private let finished: @Sendable () -> Void
    private let left: @Sendable () -> Bool
    private let hold: @Sendable () -> Bool

    init(
        method: String, arguments: [JSONValue], caller: DBusCaller, invocation: OpaquePointer, outTypes: [String],
        finished: @escaping @Sendable () -> Void, left: @escaping @Sendable () -> Bool,
        hold: @escaping @Sendable () -> Bool
    ) {
        self.method = method
        self.arguments = arguments
        self.caller = caller
        self.invocation = invocation
        self.outTypes = outTypes
        self.finished = finished
        self.left = left
        self.hold = hold
    }

    deinit { fail(.failed("the call was not answered")) }

    /// The caller left the bus while this call was in flight.
    public var callerLeft: Bool { left() }

    /// Keeps following this call's caller after the call is answered: `DBusAPI.callerLeft` reports
    /// it leaving the bus until the API lets go (`DBusApplication.letGo(of:)`, once for each hold).
    /// While the call is unanswered it always succeeds; false when the caller is no longer followed.
    public func keepFollowingCaller() -> Bool { hold() }

    /// Answers with the method's out arguments, converted to its out types;
    /// `memberTypes` as in `DBusVariant.make`.
    public func reply(_ values: [JSONValue], memberTypes: [String: String] = [:]) {
        guard values.count == outTypes.count else {
            return fail(.failed("the broker built a reply of the wrong shape"))
        }
        var children: [OpaquePointer] = []
        for (value, type) in zip(values, outTypes) {
            guard let child = DBusVariant.make(value, type: type, memberTypes: memberTypes) else {
                for built in children { g_variant_unref(g_variant_ref_sink(built)) }
                return fail(.failed("the reply cannot be carried over D-Bus (a string with a NUL character?)"))
            }
            children.append(child)
        }
        guard begin() else {
            for built in children { g_variant_unref(g_variant_ref_sink(built)) }
            return
        }
        let tuple = children.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: OpaquePointer?.self) { g_variant_new_tuple($0.baseAddress, gsize(buffer.count)) }
        }
        g_dbus_method_invocation_return_value(invocation, tuple)
        finished()
    }

    /// Answers with `error`; its message repeats at most 64 bytes of any string argument (`InputEcho`).
    public func fail(_ error: DBusError) {
        guard begin() else { return }
        let message = InputEcho.scrub(error.message, of: arguments)
        g_dbus_method_invocation_return_dbus_error(invocation, error.name, message)
        finished()
    }

    private func begin() -> Bool { !answered.exchange(true, ordering: .sequentiallyConsistent) }
}

/// The callers `DBusApplication` follows, by unique name: each one's
/// unanswered calls, the holds the API keeps on it (it has subscriptions),
/// whether it left the bus, and the watches that tell when it leaves (one
/// `NameOwnerChanged` subscription with `arg0` = its name, per connection).
/// The bus sends the broker only the leaving of callers it follows, not
/// every process that connects to the bus or leaves it.
///
/// A caller is followed from its first call. Once it has no call in flight
/// and no hold it rests: still followed, so that its next call costs the
/// bus no new match rule, until it leaves the bus or more than
/// `restingLimit` others came to rest after it (then its entry and watches
/// go). So at most `restingLimit` callers are followed beyond those the
/// API's limits bound.
///
/// A followed caller's credentials are kept, so that only its first call
/// asks the bus for them.
///
/// The methods that end watches answer them, for the caller of the method
/// to unsubscribe while it still holds the table's lock.
struct DBusCallerTable: Sendable {
    static let restingLimit = 64

    struct Entry {
        /// Which of the callers that had this name it is (`begin`).
        let serial: UInt64
        var calls = 0
        var holds = 0
        var left = false
        /// Its watches: the signal subscription's id, by connection (its address).
        var watches: [UInt: UInt32] = [:]
        /// Its process and user, once the bus said (`GetConnectionCredentials`): fixed for the life
        /// of its connection, and so of its unique name, which is never reused.
        var credentials: Credentials?
        var resting: Bool { calls == 0 && holds == 0 }
        var watchList: [Watch] { watches.map { Watch(connection: $0.key, id: $0.value) } }
    }
    struct Credentials: Equatable {
        let pid: Int64
        let uid: Int64
    }
    /// A watch to end: the connection (its address) and the subscription's id.
    struct Watch: Equatable {
        let connection: UInt
        let id: UInt32
    }
    enum Begun: Equatable {
        /// A limit is reached; nothing was counted.
        case refused
        /// Counted, for a caller followed already.
        case counted
        /// Counted, for a caller followed from now on: it needs a watch (`watched`).
        case first
    }
    private(set) var entries: [String: Entry] = [:]
    /// Calls in flight, all callers together.
    private(set) var total = 0
    /// The resting callers, the longest resting first.
    private(set) var resting: [String] = []
    /// Calls in flight of callers that left, by serial, once their name came back (`begin`).
    private(set) var departed: [UInt64: Int] = [:]
    private var lastSerial: UInt64 = 0

    /// Counts a new call of `sender`; its serial says which caller of that name made it, for `end`,
    /// `hasLeft`, `hold` and `learned`.
    ///
    /// A name that left and calls again belongs to another caller: unique names are not reused on
    /// one bus, but a new bus (after the old one went away) gives the same names out again. It gets
    /// an entry of its own, nothing of the old one's (credentials above all); the old one's calls
    /// still in flight are counted apart until they end.
    mutating func begin(_ sender: String, perCaller: Int, total limit: Int) -> (begun: Begun, serial: UInt64) {
        if let gone = entries[sender], gone.left {
            if gone.calls > 0 { departed[gone.serial] = gone.calls }
            entries[sender] = nil
        }
        let entry = entries[sender]
        guard total < limit, (entry?.calls ?? 0) < perCaller else { return (.refused, 0) }
        if entry?.resting == true { resting.removeAll { $0 == sender } }
        if entry == nil {
            lastSerial += 1
            entries[sender] = Entry(serial: lastSerial)
        }
        entries[sender]?.calls += 1
        total += 1
        return (entry == nil ? .first : .counted, entries[sender]?.serial ?? 0)
    }

    /// A call of `sender` (that caller: `serial`) was answered.
    mutating func end(_ sender: String, serial: UInt64) -> [Watch] {
        guard entries[sender]?.serial == serial else {
            guard let calls = departed[serial] else { return [] }
            departed[serial] = calls > 1 ? calls - 1 : nil
            total -= 1
            return []
        }
        entries[sender]?.calls -= 1
        total -= 1
        return restIfIdle(sender)
    }

    /// The API keeps following `sender` after its calls end; false when it is not followed
    /// or resting (no call of it is in flight).
    mutating func hold(_ sender: String, serial: UInt64) -> Bool {
        guard let entry = entries[sender], entry.serial == serial, !entry.resting else { return false }
        entries[sender]?.holds += 1
        return true
    }

    /// The API lets go of one hold on `sender`.
    mutating func release(_ sender: String) -> [Watch] {
        guard let holds = entries[sender]?.holds, holds > 0 else { return [] }
        entries[sender]?.holds = holds - 1
        return restIfIdle(sender)
    }

    /// `sender` left the bus: its watches end (it cannot come back: unique names are not reused),
    /// and its entry with them once it has no call in flight and no hold.
    mutating func leave(_ sender: String) -> [Watch] {
        guard var entry = entries[sender] else { return [] }
        if entry.resting { return drop(sender) }
        entry.left = true
        entry.credentials = nil
        let ended = entry.watchList
        entry.watches = [:]
        entries[sender] = entry
        return ended
    }

    /// Every caller left (the bus went away).
    mutating func leaveAll() -> [Watch] { entries.keys.flatMap { leave($0) } }

    /// Whether that caller left the bus (a caller of that name since counts as its leaving).
    func hasLeft(_ sender: String, serial: UInt64) -> Bool {
        entries[sender].map { $0.serial != serial || $0.left } ?? true
    }

    /// The callers that need a watch on a new connection: followed, not gone.
    var present: [String] { entries.filter { !$0.value.left }.map(\.key) }

    /// What the bus said of `sender`'s process and user, kept while it is followed.
    mutating func learned(_ sender: String, serial: UInt64, _ credentials: Credentials) {
        guard let entry = entries[sender], entry.serial == serial, !entry.left else { return }
        entries[sender]?.credentials = credentials
    }

    /// `sender`'s leaving is watched on `connection` by subscription `id`.
    mutating func watched(_ sender: String, connection: UInt, id: UInt32) {
        entries[sender]?.watches[connection] = id
    }

    /// `connection` closes: the watches on it end, and resting callers left with none go.
    mutating func closing(_ connection: UInt) -> [Watch] {
        var ended: [Watch] = []
        for (name, entry) in entries {
            guard let id = entry.watches[connection] else { continue }
            entries[name]?.watches[connection] = nil
            ended.append(Watch(connection: connection, id: id))
            if entry.resting && entry.watches.count == 1 { ended += drop(name) }
        }
        return ended
    }

    /// Its last call answered and its last hold let go: `sender` rests, or goes if it left; the
    /// longest resting caller goes when more than `restingLimit` rest.
    private mutating func restIfIdle(_ sender: String) -> [Watch] {
        guard let entry = entries[sender], entry.resting else { return [] }
        if entry.left { return drop(sender) }
        resting.append(sender)
        guard resting.count > Self.restingLimit else { return [] }
        return drop(resting[0])
    }

    private mutating func drop(_ sender: String) -> [Watch] {
        guard let entry = entries.removeValue(forKey: sender) else { return [] }
        if entry.resting { resting.removeAll { $0 == sender } }
        return entry.watchList
    }
}
