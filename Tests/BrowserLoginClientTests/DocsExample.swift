import BrowserLoginClient
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

// The complete example of docs/apps/swift.md, compiled and run here; a test
// checks that the page shows exactly this code.
// BEGIN docs/apps/swift.md
/// The API answered, but not with "created".
struct NoteRefused: Error { var status: Int }

/// Adds a note to the demo API of com.example.notes, signing in through the
/// browser first when the app is not signed in; answers the note's text.
func addNote(_ text: String, broker: BrowserLoginClient = BrowserLoginClient()) async throws -> String {
    let client = "com.example.notes"
    if try await broker.session(client).status != .signedIn {
        let attempt = try await broker.start(client)  // opens the browser
        print("Finish signing in in your browser (attempt \(attempt.attemptId)).")
        _ = try await broker.wait(client, timeout: .seconds(600))
    }
    struct Note: Codable { var text: String }
    let response = try await broker.request(
        client, method: "POST", path: "/api/notes", headers: ["Content-Type": "application/json"],
        body: Array(try JSONEncoder().encode(Note(text: text))))
    guard response.status == 201 else { throw NoteRefused(status: response.status) }
    return try response.decode(Note.self).text
}
// END docs/apps/swift.md

@Suite("docs/apps/swift.md", .dedicatedThread)
struct DocsExampleTests {
    @Test func thePageShowsTheTestedExample() throws {
        let page = try String(contentsOfFile: repositoryRoot + "/docs/apps/swift.md", encoding: .utf8)
        let source = try String(contentsOfFile: #filePath, encoding: .utf8)
        let example = try #require(
            source.components(separatedBy: "// BEGIN docs/apps/swift.md\n").last?
                .components(separatedBy: "// END docs/apps/swift.md").first)
        #expect(page.contains("```swift\nimport BrowserLoginClient\nimport Foundation\n\n" + example + "```\n"))
    }

    @Test func theExampleSignsInAndAddsANote() async throws {
        let h = try ClientTests.world()
        let broker = BrowserLoginClient(socketPath: h.socketPath)
        #expect(try await addNote("from the docs", broker: broker) == "from the docs")
        #expect(try await broker.session("com.example.notes").status == .signedIn)
        #expect(try await addNote("again", broker: broker) == "again")
    }
}
