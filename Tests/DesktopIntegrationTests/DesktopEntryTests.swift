import BrowserLoginTestSupport
import DesktopEntry
import Foundation
import Testing

@Suite("Desktop file")
struct DesktopEntryTests {
    @Test func theGeneratedFileListsEachSchemeOnceAndSorted() {
        let text = DesktopEntry.text(
            exec: "/usr/bin/browser-login", schemes: ["com.example.b", "com.example.a", "com.example.b"])
        #expect(text.contains("MimeType=x-scheme-handler/com.example.a;x-scheme-handler/com.example.b;\n"))
        #expect(text.contains("Exec=/usr/bin/browser-login finish %u\n"))
        #expect(text.contains("NoDisplay=true\n"))
        #expect(text.contains("DBusActivatable=true\n"))
        #expect(DesktopEntry.schemes(inDesktopFile: text) == ["com.example.a", "com.example.b"])
    }

    @Test func anExecPathWithBlanksIsQuoted() {
        let text = DesktopEntry.text(exec: "/opt/my apps/browser-login", schemes: ["com.example.a"])
        #expect(text.contains("Exec=\"/opt/my apps/browser-login\" finish %u\n"))
    }

    @Test func theShippedTemplateIsTheGeneratorsTemplate() throws {
        let shipped = try String(
            contentsOfFile: repositoryRoot + "/dbus/org.browserlogin.Broker.desktop.in", encoding: .utf8)
        #expect(shipped == DesktopEntry.template)
    }

    @Test func schemesAreCheckedAsDesktopFilesNeedThem() {
        #expect(DesktopEntry.isValidScheme("com.example.notes"))
        #expect(!DesktopEntry.isValidScheme("Com.example"))
        #expect(!DesktopEntry.isValidScheme("1abc"))
        #expect(!DesktopEntry.isValidScheme("a b"))
        #expect(DesktopEntry.scheme(ofURL: "com.example.notes:/callback") == "com.example.notes")
        #expect(DesktopEntry.scheme(ofURL: "no-colon") == nil)
    }
}
