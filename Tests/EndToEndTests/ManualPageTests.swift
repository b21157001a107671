import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// browser-login(1), browser-login-broker(8) and browser-login-server(1) say
/// what `--help` says (issue 36): their synopses, usage lines, commands and
/// option lists are generated blocks (scripts/man)
/// that the program prints from the declarations `--help` is made of. A committed page whose blocks
/// differ from the built program's, or a command without its blocks, fails.
@Suite("Manual pages made from the declarations", .dedicatedThread)
struct ManualPageTests {
    static let begin = ".\\\" BEGIN generated: "
    static let end = ".\\\" END generated"

    /// Each generated block of `page`: the command line in its marker, and the text in the page.
    static func blocks(_ page: String) throws -> [(command: [String], text: String)] {
        var found: [(command: [String], text: String)] = []
        var current: (command: [String], lines: [Substring])?
        for line in try String(contentsOfFile: page, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix(begin) {
                current = (line.dropFirst(begin.count).split(separator: " ").map(String.init), [])
            } else if line == end, let block = current {
                found.append((block.command, block.lines.joined(separator: "\n")))
                current = nil
            } else if current != nil {
                current!.lines.append(line)
            }
        }
        return found
    }

    @Test(arguments: ["browser-login.1", "browser-login-broker.8", "browser-login-server.1"])
    func everyGeneratedBlockIsWhatTheProgramPrintsNow(page: String) throws {
        let blocks = try Self.blocks(repositoryRoot + "/man/" + page)
        #expect(!blocks.isEmpty)
        for block in blocks {
            let run = try runProgram(binDirectory + "/" + block.command[0], Array(block.command.dropFirst()))
            #expect(run.status == 0, "\(block.command): \(run.err)")
            #expect(
                block.text + "\n" == run.out,
                "man/\(page) is not current for '\(block.command.joined(separator: " "))': run scripts/man")
        }
    }

    @Test func everyCommandAndTheProgramHaveTheirUsageAndOptions() throws {
        let help = try runProgram(binDirectory + "/browser-login", ["--help"]).out
        let table = help.components(separatedBy: "Commands:\n").last?.components(separatedBy: "\n\n").first ?? ""
        let commands = table.split(separator: "\n").compactMap { line -> String? in
            line.hasPrefix("  ") && !line.hasPrefix("   ") ? line.split(separator: " ").first.map(String.init) : nil
        }
        #expect(commands.count >= 13 && commands.contains("sign-out"), "\(commands)")
        let generated = Set(try Self.blocks(repositoryRoot + "/man/browser-login.1").map { $0.command.joined(separator: " ") })
        for command in commands {
            for part in ["usage", "options"] {
                #expect(
                    generated.contains("browser-login help --troff \(part) \(command)"),
                    "browser-login(1) has no generated \(part) of '\(command)'")
            }
        }
        #expect(generated.contains("browser-login help --troff options"), "the program's own options")
        let broker = try Self.blocks(repositoryRoot + "/man/browser-login-broker.8").map(\.command)
        #expect(broker == [["browser-login-broker", "help", "--troff", "options"]], "the daemon's options")
    }

    /// The server's page: its synopsis, commands and options are the
    /// declarations; every command `--help` lists is one the program runs.
    @Test func theServersPageIsItsDeclarationsAndEveryCommandRuns() throws {
        let server = binDirectory + "/browser-login-server"
        let blocks = try Self.blocks(repositoryRoot + "/man/browser-login-server.1")
        #expect(
            blocks.map(\.command) == ["synopsis", "commands", "options"].map { ["browser-login-server", "help", "--troff", $0] })
        let page = blocks.map(\.text).joined(separator: "\n")
        let help = try runProgram(server, ["--help"])
        #expect(help.status == 0)
        let table = help.out.components(separatedBy: "Commands:\n").last?.components(separatedBy: "\n\n").first ?? ""
        // The left column of each entry, without its placeholders (EMAIL, [EMAIL], [FLAGS]).
        let commands = table.split(separator: "\n").filter { $0.hasPrefix("  ") && !$0.hasPrefix("   ") }.map {
            ($0.dropFirst(2).components(separatedBy: "  ").first ?? "").split(separator: " ")
                .filter { !$0.hasPrefix("[") && $0.uppercased() != $0 }.joined(separator: " ")
        }
        #expect(commands.count == 14 && commands.contains("invitations create"), "\(commands)")
        for option in ["--listen", "--secret-key", "--test-account", "--ready-file"] {
            #expect(page.contains(".BI \"" + option.replacingOccurrences(of: "-", with: "\\-")), "\(option)")
        }
        // Each command the page and --help name runs (the database is made by migrate): none is a usage error.
        let directory = try TemporaryDirectory("man")
        let database = ["--database", directory.path + "/login.sqlite"]
        let sample = ["EMAIL": "ada@example.com", "[EMAIL]": "ada@example.com", "ID": "inv_unknown"]
        for command in ["migrate"] + commands.filter({ $0 != "serve" && $0 != "migrate" }) {
            #expect(page.contains(".B " + command + " ") || page.contains(".B browser\\-login\\-server " + command + " "))
            let line = table.split(separator: "\n").first { $0.hasPrefix("  " + command + " ") } ?? ""
            let arguments = line.split(separator: " ").compactMap { sample[String($0)] }
            let run = try runProgram(server, command.split(separator: " ").map(String.init) + arguments + database)
            #expect(run.status == 0 || run.status == 1, "\(command): \(run)")
            #expect(run.status == 0 || !run.err.contains("see --help"), "\(command): \(run.err)")
        }
        let wrong = try runProgram(server, ["users", "frob"] + database)
        #expect(wrong.status == 64)
        #expect(wrong.err.hasPrefix("browser-login-server: unknown command 'users frob'; the users commands are:\n"))
        #expect(!wrong.err.contains("flags of serve"), "a mistake is told in a few lines, not with the whole help")
    }

    @Test func scriptsManFindsThePagesCurrent() throws {
        let check = try runProgram(repositoryRoot + "/scripts/man", ["--check", binDirectory])
        #expect(check.status == 0, "\(check.err)")
    }
}
