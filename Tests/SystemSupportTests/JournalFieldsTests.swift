import Foundation
import SystemSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Journal fields")
struct JournalFieldsTests {
    @Test func anEntryBecomesTheMessageItsPriorityIdentifierSourceAndMetadataFields() {
        let recorder = RecordingLogHandler()
        let logger = Logger(label: "browser-login-broker", minimum: .info, handler: recorder)
        let line = #line + 1
        logger.info(
            "signed in",
            [
                "client": "com.example.notes", "attempt.id": "at_x", "error.code": "EXCHANGE_FAILED",
                Logger.messageIDKey: "02e84d8342294420a3ed5db5b3866722",
            ])
        let entry = recorder.entries[0]
        #expect(
            JournalFields.fields(of: entry) == [
                "MESSAGE=signed in", "PRIORITY=6", "SYSLOG_IDENTIFIER=browser-login-broker",
                "CODE_FILE=SystemSupportTests/JournalFieldsTests.swift", "CODE_LINE=\(line)",
                "CODE_FUNC=anEntryBecomesTheMessageItsPriorityIdentifierSourceAndMetadataFields()",
                "ATTEMPT_ID=at_x", "CLIENT=com.example.notes", "CODE=EXCHANGE_FAILED",
                "MESSAGE_ID=02e84d8342294420a3ed5db5b3866722",
            ])
        // The text line is as before: no message id, no source.
        #expect(
            entry.line
                == "<6>browser-login-broker: signed in attempt.id=at_x client=com.example.notes error.code=EXCHANGE_FAILED")
    }

    @Test func keysBecomeLegalNamesThatCannotOverrideTheEntrysOwnFields() {
        #expect(JournalFields.name(forKey: "attempt.id") == "ATTEMPT_ID")
        #expect(JournalFields.name(forKey: "rpc.max_connections") == "RPC_MAX_CONNECTIONS")
        #expect(JournalFields.name(forKey: "browser.program") == "BROWSER_PROGRAM")
        #expect(JournalFields.name(forKey: "errno") == "ERRNO")
        #expect(JournalFields.name(forKey: "error") == "ERROR")
        #expect(JournalFields.name(forKey: "é-x") == "BL___X")
        #expect(JournalFields.name(forKey: "message") == "BL_MESSAGE")
        #expect(JournalFields.name(forKey: "priority") == "BL_PRIORITY")
        #expect(JournalFields.name(forKey: "code") == "BL_CODE")
        #expect(JournalFields.name(forKey: "syslog.identifier") == "BL_SYSLOG_IDENTIFIER")
        #expect(JournalFields.name(forKey: "code.line") == "BL_CODE_LINE")
        #expect(JournalFields.name(forKey: "_pid") == "BL__PID")
        #expect(JournalFields.name(forKey: "2fa") == "BL_2FA")
        #expect(JournalFields.name(forKey: "") == "BL_")
        #expect(JournalFields.name(forKey: String(repeating: "k", count: 80)).count == 64)
        for key in ["attempt.id", "message", "_pid", "2fa", "é-x", String(repeating: "k", count: 80)] {
            let name = JournalFields.name(forKey: key)
            #expect(name.utf8.allSatisfy { (0x41...0x5A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x5F })
            #expect(name.first != "_" && name.first?.isNumber == false)
        }
    }

    @Test func aValueIsSentAsItIsInAFieldOfItsOwn() {
        let entry = LogEntry(
            level: .warning, label: "p", message: "m", metadata: ["problem": "a\nPRIORITY=0 b=\"c\""])
        #expect(
            JournalFields.fields(of: entry) == [
                "MESSAGE=m", "PRIORITY=4", "SYSLOG_IDENTIFIER=p", "PROBLEM=a\nPRIORITY=0 b=\"c\"",
            ])
    }

    @Test func onlyAWellFormedMessageIDIsSent() {
        #expect(JournalFields.isID128("02e84d8342294420a3ed5db5b3866722"))
        #expect(!JournalFields.isID128("02E84D8342294420A3ED5DB5B3866722"))
        #expect(!JournalFields.isID128("02e84d83-4229-4420-a3ed-5db5b3866722"))
        #expect(!JournalFields.isID128(""))
        let entry = LogEntry(level: .info, label: "p", message: "m", metadata: [Logger.messageIDKey: "sign-in"])
        #expect(!JournalFields.fields(of: entry).contains { $0.hasPrefix("MESSAGE_ID=") })
    }

    @Test func theJournalStreamIsTheDescriptorWhoseDeviceAndInodeItNames() throws {
        let path = NSTemporaryDirectory() + "/journal-stream-\(getpid())"
        let fd = open(path, O_CREAT | O_RDWR, 0o600)
        try #require(fd >= 0)
        defer {
            close(fd)
            unlink(path)
        }
        var info = stat()
        try #require(fstat(fd, &info) == 0)
        let value = "\(info.st_dev):\(info.st_ino)"
        #expect(JournalStream.isJournal(fileDescriptor: fd, environment: ["JOURNAL_STREAM": value]))
        #expect(!JournalStream.isJournal(fileDescriptor: fd, environment: [:]))
        #expect(!JournalStream.isJournal(fileDescriptor: fd, environment: ["JOURNAL_STREAM": "\(info.st_dev):1"]))
        #expect(!JournalStream.isJournal(fileDescriptor: fd, environment: ["JOURNAL_STREAM": value + ":0"]))
        #expect(!JournalStream.isJournal(fileDescriptor: -1, environment: ["JOURNAL_STREAM": value]))
        #expect(JournalStream.parse("12:34")! == (12, 34))
        #expect(JournalStream.parse("12:") == nil)
        #expect(JournalStream.parse("x:1") == nil)
    }
}
