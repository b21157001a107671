import SystemSupport
import Testing

@Suite("Logger")
struct LoggerTests {
    @Test func linesHaveThePriorityTheLabelAndSortedFields() {
        let recorder = RecordingLogHandler()
        let logger = Logger(label: "prog", minimum: .info, handler: recorder)
        logger.notice("serving", ["socket": "/run/x.sock", "clients": "2"])
        logger.debug("not logged")
        #expect(recorder.lines == ["<5>prog: serving clients=2 socket=/run/x.sock"])
        #expect(recorder.entries.first?.metadata["clients"] == "2")
    }

    @Test func valuesThatCouldForgeAFieldOrALineAreQuoted() {
        #expect(Logger.quote("plain") == "plain")
        #expect(Logger.quote("") == "\"\"")
        #expect(Logger.quote("two words") == "\"two words\"")
        #expect(Logger.quote("a\"b") == "\"a\\\"b\"")
        #expect(Logger.quote("a\\b c") == "\"a\\\\b c\"")
        #expect(Logger.quote("x\ny=1") == "\"x\\ny=1\"")
        #expect(Logger.quote("t\u{1}") == "\"t\\u{1}\"")
        #expect(Logger.quote("é") == "\"é\"")
    }

    @Test func aSinkGetsFormattedLines() {
        let recorder = RecordingLogHandler()
        let logger = Logger(
            label: "p", minimum: .debug,
            sink: { line in recorder.handle(LogEntry(level: .info, label: "", message: line, metadata: [:])) })
        logger.error("failed", ["error": "no such file"])
        #expect(recorder.entries.map(\.message) == ["<3>p: failed error=\"no such file\""])
    }
}
