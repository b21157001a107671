import Testing

@testable import BrokerSystem

/// The callers the D-Bus API follows (DBusCallerTable): who is watched for
/// leaving the bus, from its first call until it leaves (or, resting, until
/// too many others rest after it), and which watches end when.
@Suite struct DBusCallerTableTests {
    typealias Watch = DBusCallerTable.Watch

    @Test func aCallerIsFollowedFromItsFirstCallAndRestsAfterItsLastAnswer() {
        var table = DBusCallerTable()
        let first = table.call(":1.7", perCaller: 4, total: 8)
        table.watched(":1.7", connection: 100, id: 5)
        let second = table.call(":1.7", perCaller: 4, total: 8)
        let endedByFirstAnswer = table.end(":1.7")
        let endedByLastAnswer = table.end(":1.7")
        #expect(first == .first && second == .counted)
        #expect(endedByFirstAnswer.isEmpty && endedByLastAnswer.isEmpty)
        // Resting: still watched, and its next call needs no new watch.
        #expect(table.resting == [":1.7"] && table.total == 0)
        #expect(table.present == [":1.7"])
        let again = table.call(":1.7", perCaller: 4, total: 8)
        #expect(again == .counted && table.resting.isEmpty)
        // It leaves while resting: its entry and its watch go.
        _ = table.end(":1.7")
        let endedByLeaving = table.leave(":1.7")
        #expect(endedByLeaving == [Watch(connection: 100, id: 5)])
        #expect(table.entries.isEmpty && table.resting.isEmpty && table.hasLeft(":1.7"))
    }

    @Test func whatTheBusSaidOfACallerIsKeptWhileItIsFollowed() {
        var table = DBusCallerTable()
        let credentials = DBusCallerTable.Credentials(pid: 42, uid: 1000)
        table.learned(":1.3", credentials)
        #expect(table.entries[":1.3"] == nil)
        _ = table.call(":1.3", perCaller: 4, total: 8)
        table.learned(":1.3", credentials)
        _ = table.end(":1.3")
        #expect(table.entries[":1.3"]?.credentials == credentials)
        _ = table.leave(":1.3")
        let next = table.call(":1.3", perCaller: 4, total: 8)
        #expect(next == .first && table.entries[":1.3"]?.credentials == nil)
        // Not learnt for a caller that left.
        _ = table.leave(":1.3")
        table.learned(":1.3", credentials)
        #expect(table.entries[":1.3"]?.credentials == nil)
    }

    @Test func aNameThatComesBackOnANewBusIsAnotherCaller() {
        var table = DBusCallerTable()
        let old = table.begin(":1.5", perCaller: 4, total: 8)
        table.learned(":1.5", serial: old.serial, .init(pid: 42, uid: 1000))
        // The bus went away with the call in flight; a new bus gives the name to another process.
        _ = table.leaveAll()
        let new = table.begin(":1.5", perCaller: 4, total: 8)
        #expect(new.begun == .first && new.serial != old.serial)
        #expect(table.entries[":1.5"]?.credentials == nil)
        #expect(table.hasLeft(":1.5", serial: old.serial) && !table.hasLeft(":1.5", serial: new.serial))
        let oldHold = table.hold(":1.5", serial: old.serial)
        #expect(!oldHold)
        // The old call's answer counts against the old caller, not the new one.
        #expect(table.total == 2 && table.departed == [old.serial: 1])
        _ = table.end(":1.5", serial: old.serial)
        #expect(table.total == 1 && table.departed.isEmpty && table.entries[":1.5"]?.calls == 1)
        _ = table.end(":1.5", serial: old.serial)
        #expect(table.total == 1)
        _ = table.end(":1.5", serial: new.serial)
        #expect(table.total == 0 && table.resting == [":1.5"])
    }

    @Test func onlyTheMostRecentRestingCallersStayFollowed() {
        var table = DBusCallerTable()
        let limit = DBusCallerTable.restingLimit
        var ended: [Watch] = []
        for n in 0...limit {
            _ = table.call(":1.\(n)", perCaller: 4, total: 8)
            table.watched(":1.\(n)", connection: 100, id: UInt32(n))
            ended += table.end(":1.\(n)")
        }
        // The first to rest went when one more came to rest than the limit allows.
        #expect(ended == [Watch(connection: 100, id: 0)])
        #expect(table.entries.count == limit && table.resting.count == limit)
        #expect(table.entries[":1.0"] == nil && table.resting.first == ":1.1")
    }

    @Test func theLimitsRefuseWithoutCounting() {
        var table = DBusCallerTable()
        let answers = [
            table.call(":1.1", perCaller: 2, total: 3), table.call(":1.1", perCaller: 2, total: 3),
            table.call(":1.1", perCaller: 2, total: 3), table.call(":1.2", perCaller: 2, total: 3),
            table.call(":1.3", perCaller: 2, total: 3),
        ]
        #expect(answers == [.first, .counted, .refused, .first, .refused])
        #expect(table.total == 3)
        #expect(table.entries[":1.3"] == nil)
    }

    @Test func holdsKeepTheCallerWatchedAfterItsCallsUntilEachIsLetGo() {
        var table = DBusCallerTable()
        _ = table.call(":1.9", perCaller: 4, total: 8)
        table.watched(":1.9", connection: 100, id: 1)
        let held = table.hold(":1.9") && table.hold(":1.9")
        let endedByAnswer = table.end(":1.9")
        let endedByFirstRelease = table.release(":1.9")
        #expect(held)
        #expect(endedByAnswer.isEmpty && endedByFirstRelease.isEmpty && table.resting.isEmpty)
        // It leaves while held: the watch ends, the entry stays until the last hold is let go.
        let endedByLeaving = table.leave(":1.9")
        #expect(endedByLeaving == [Watch(connection: 100, id: 1)] && table.hasLeft(":1.9"))
        let endedByLastRelease = table.release(":1.9")
        #expect(endedByLastRelease.isEmpty && table.entries.isEmpty && table.resting.isEmpty)
        // Nothing to hold once it is not followed, and an extra release changes nothing.
        let heldAfter = table.hold(":1.9")
        let extraRelease = table.release(":1.9")
        #expect(!heldAfter && extraRelease.isEmpty)
    }

    @Test func leavingEndsTheWatchesOnceAndMarksTheCalls() {
        var table = DBusCallerTable()
        _ = table.call(":1.4", perCaller: 4, total: 8)
        table.watched(":1.4", connection: 100, id: 1)
        table.watched(":1.4", connection: 200, id: 2)
        #expect(!table.hasLeft(":1.4"))
        let endedByLeaving = table.leave(":1.4")
        let endedByLeavingAgain = table.leave(":1.4")
        #expect(Set(endedByLeaving.map(\.id)) == [1, 2])
        #expect(endedByLeavingAgain.isEmpty)
        #expect(table.hasLeft(":1.4"))
        // Not watched again on a new connection, and gone with its last answer, not resting.
        #expect(table.present.isEmpty)
        let endedByAnswer = table.end(":1.4")
        #expect(endedByAnswer.isEmpty && table.entries.isEmpty && table.resting.isEmpty)
        #expect(table.hasLeft(":1.4"))
    }

    @Test func aClosingConnectionEndsOnlyItsOwnWatches() {
        var table = DBusCallerTable()
        _ = table.call(":1.1", perCaller: 4, total: 8)
        _ = table.call(":1.2", perCaller: 4, total: 8)
        table.watched(":1.1", connection: 100, id: 1)
        table.watched(":1.1", connection: 200, id: 3)
        table.watched(":1.2", connection: 100, id: 2)
        let endedByClosing = table.closing(100)
        let endedByClosingAgain = table.closing(100)
        #expect(Set(endedByClosing.map(\.id)) == [1, 2] && endedByClosingAgain.isEmpty)
        // Resting with a watch left, or with none.
        _ = table.end(":1.1")
        _ = table.end(":1.2")
        #expect(table.entries[":1.1"]?.watches == [200: 3] && table.entries[":1.2"]?.watches == [:])
        let endedByTheOtherClosing = table.closing(200)
        #expect(endedByTheOtherClosing == [Watch(connection: 200, id: 3)])
        #expect(table.entries[":1.1"] == nil && table.resting == [":1.2"])
    }

    @Test func whenTheBusGoesEveryCallerHasLeft() {
        var table = DBusCallerTable()
        _ = table.call(":1.1", perCaller: 4, total: 8)
        _ = table.call(":1.2", perCaller: 4, total: 8)
        table.watched(":1.1", connection: 100, id: 1)
        table.watched(":1.2", connection: 100, id: 2)
        _ = table.end(":1.2")
        let ended = table.leaveAll()
        #expect(Set(ended.map(\.id)) == [1, 2])
        #expect(table.hasLeft(":1.1") && table.hasLeft(":1.2"))
        #expect(table.present.isEmpty && table.resting.isEmpty && table.entries.count == 1)
    }
}

/// The table's calls for the caller that has each name now.
extension DBusCallerTable {
    fileprivate mutating func call(_ sender: String, perCaller: Int, total: Int) -> Begun {
        begin(sender, perCaller: perCaller, total: total).begun
    }
    fileprivate func serial(_ sender: String) -> UInt64 { entries[sender]?.serial ?? 0 }
    fileprivate mutating func end(_ sender: String) -> [Watch] { end(sender, serial: serial(sender)) }
    fileprivate mutating func hold(_ sender: String) -> Bool { hold(sender, serial: serial(sender)) }
    fileprivate func hasLeft(_ sender: String) -> Bool { hasLeft(sender, serial: serial(sender)) }
    fileprivate mutating func learned(_ sender: String, _ credentials: Credentials) {
        learned(sender, serial: serial(sender), credentials)
    }
}
