import Testing

@testable import BrokerSystem

/// The callers the D-Bus API follows (DBusCallerTable): who is watched for
/// leaving the bus, from its first call until its last call is answered and
/// the API lets go of it, and which watches end when.
@Suite struct DBusCallerTableTests {
    typealias Watch = DBusCallerTable.Watch

    @Test func aCallerIsFollowedFromItsFirstCallToItsLastAnswer() {
        var table = DBusCallerTable()
        let first = table.begin(":1.7", perCaller: 4, total: 8)
        table.watched(":1.7", connection: 100, id: 5)
        let second = table.begin(":1.7", perCaller: 4, total: 8)
        let endedByFirstAnswer = table.end(":1.7")
        #expect(first == .first && second == .counted)
        #expect(endedByFirstAnswer.isEmpty)
        #expect(table.present == [":1.7"])
        // The last answer ends the watch, and the next call starts a new one.
        let endedByLastAnswer = table.end(":1.7")
        #expect(endedByLastAnswer == [Watch(connection: 100, id: 5)])
        #expect(table.present.isEmpty && table.total == 0)
        let again = table.begin(":1.7", perCaller: 4, total: 8)
        #expect(again == .first)
    }

    @Test func theLimitsRefuseWithoutCounting() {
        var table = DBusCallerTable()
        let answers = [
            table.begin(":1.1", perCaller: 2, total: 3), table.begin(":1.1", perCaller: 2, total: 3),
            table.begin(":1.1", perCaller: 2, total: 3), table.begin(":1.2", perCaller: 2, total: 3),
            table.begin(":1.3", perCaller: 2, total: 3),
        ]
        #expect(answers == [.first, .counted, .refused, .first, .refused])
        #expect(table.total == 3)
        #expect(table.entries[":1.3"] == nil)
    }

    @Test func holdsKeepTheCallerWatchedAfterItsCallsUntilEachIsLetGo() {
        var table = DBusCallerTable()
        _ = table.begin(":1.9", perCaller: 4, total: 8)
        table.watched(":1.9", connection: 100, id: 1)
        let held = table.hold(":1.9") && table.hold(":1.9")
        let endedByAnswer = table.end(":1.9")
        let endedByFirstRelease = table.release(":1.9")
        let endedByLastRelease = table.release(":1.9")
        #expect(held)
        #expect(endedByAnswer.isEmpty && endedByFirstRelease.isEmpty)
        #expect(endedByLastRelease == [Watch(connection: 100, id: 1)])
        #expect(table.entries.isEmpty)
        // Nothing to hold once it is not followed, and an extra release changes nothing.
        let heldAfter = table.hold(":1.9")
        let extraRelease = table.release(":1.9")
        #expect(!heldAfter && extraRelease.isEmpty)
    }

    @Test func leavingEndsTheWatchesOnceAndMarksTheCalls() {
        var table = DBusCallerTable()
        _ = table.begin(":1.4", perCaller: 4, total: 8)
        table.watched(":1.4", connection: 100, id: 1)
        table.watched(":1.4", connection: 200, id: 2)
        #expect(!table.hasLeft(":1.4"))
        let endedByLeaving = table.leave(":1.4")
        let endedByLeavingAgain = table.leave(":1.4")
        #expect(Set(endedByLeaving.map(\.id)) == [1, 2])
        #expect(endedByLeavingAgain.isEmpty)
        #expect(table.hasLeft(":1.4"))
        // Not watched again on a new connection, and gone with its last answer.
        #expect(table.present.isEmpty)
        let endedByAnswer = table.end(":1.4")
        #expect(endedByAnswer.isEmpty && table.entries.isEmpty)
        #expect(table.hasLeft(":1.4"))
    }

    @Test func aClosingConnectionEndsOnlyItsOwnWatches() {
        var table = DBusCallerTable()
        _ = table.begin(":1.1", perCaller: 4, total: 8)
        _ = table.begin(":1.2", perCaller: 4, total: 8)
        table.watched(":1.1", connection: 100, id: 1)
        table.watched(":1.1", connection: 200, id: 3)
        table.watched(":1.2", connection: 100, id: 2)
        let endedByClosing = table.closing(100)
        let endedByClosingAgain = table.closing(100)
        let endedByAnswerOfOne = table.end(":1.1")
        let endedByAnswerOfTwo = table.end(":1.2")
        #expect(Set(endedByClosing.map(\.id)) == [1, 2] && endedByClosingAgain.isEmpty)
        #expect(endedByAnswerOfOne == [Watch(connection: 200, id: 3)])
        #expect(endedByAnswerOfTwo.isEmpty)
    }

    @Test func whenTheBusGoesEveryCallerHasLeft() {
        var table = DBusCallerTable()
        _ = table.begin(":1.1", perCaller: 4, total: 8)
        _ = table.begin(":1.2", perCaller: 4, total: 8)
        table.watched(":1.1", connection: 100, id: 1)
        table.watched(":1.2", connection: 100, id: 2)
        let ended = table.leaveAll()
        #expect(Set(ended.map(\.id)) == [1, 2])
        #expect(table.hasLeft(":1.1") && table.hasLeft(":1.2"))
        #expect(table.present.isEmpty)
    }
}
