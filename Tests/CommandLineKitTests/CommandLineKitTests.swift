import CommandLineKit
import Testing

@Suite struct CommandLineKitTests {
    let command = Command(
        "tool run", summary: "runs", arguments: ["NAME"],
        options: [
            .flag("json", "print JSON"), .value("client", "ID", "only this client"),
            .value(
                "scheme", "SCHEME",
                "a scheme to register, given once per scheme; the help of an option is wrapped to fit 80 columns",
                repeatable: true),
        ],
        description: "Runs NAME.")

    func arguments(_ args: [String]) throws -> Arguments {
        guard case .run(let parsed) = try command.parse(args) else { throw UsageError("help") }
        return parsed
    }

    func failure(_ args: [String]) -> String? {
        do {
            _ = try command.parse(args)
            return nil
        } catch { return error.message }
    }

    @Test func parsesFlagsOptionsAndArguments() throws {
        let parsed = try arguments(["--json", "x", "--client=c1", "--scheme", "a", "--scheme=b", "--client", "c2"])
        #expect(parsed.has("json"))
        #expect(parsed["client"] == "c2")
        #expect(parsed.all("scheme") == ["a", "b"])
        #expect(parsed.positionals == ["x"])
        #expect(try arguments(["--", "--json"]).positionals == ["--json"])
        #expect(try arguments(["-"]).positionals == ["-"])
    }

    @Test func reportsMistakes() {
        #expect(failure(["x", "--bogus"]) == "unknown option --bogus; see --help")
        #expect(failure(["x", "-b"]) == "unknown option -b; see --help")
        #expect(failure(["x", "--json=1"]) == "unknown option --json; see --help")
        #expect(failure(["x", "--client"]) == "--client needs a value")
        #expect(failure([]) == "expected exactly one NAME; see --help")
        #expect(failure(["x", "y"]) == "unexpected argument 'y'; see --help")
        #expect(UsageError.exitStatus == 64)
    }

    @Test func answersHelpAnywhereBeforeTheEndOfOptions() throws {
        for args in [["--help"], ["x", "-h"], ["--bogus", "--help"]] {
            guard case .help = try command.parse(args) else {
                Issue.record("\(args) did not ask for help")
                continue
            }
        }
        #expect(try arguments(["--", "--help"]).positionals == ["--help"])
    }

    @Test func writesHelpFromTheDeclarations() {
        #expect(command.usage == "tool run NAME [--json] [--client ID] [--scheme SCHEME]...")
        #expect(
            command.help == """
                Usage: tool run NAME [--json] [--client ID] [--scheme SCHEME]...

                Runs NAME.

                  --json           print JSON
                  --client ID      only this client
                  --scheme SCHEME  a scheme to register, given once per scheme; the help of an
                                   option is wrapped to fit 80 columns
                  -h, --help       this help
                """)
    }

    @Test func aLongGeneratedSynopsisStaysIn80ColumnsWithItsIndent() {
        let many = Command(
            "tool start", arguments: ["CLIENT"],
            options: (1...12).map { .value("option-number-\($0)", "VALUE", "an option") })
        let usage = many.help.split(separator: "\n").prefix { !$0.isEmpty }
        #expect(usage.count > 2)
        for line in usage { #expect(line.count <= 80, "\(line.count): \(line)") }
    }

    @Test func aProgramWithSubcommandsStopsAtTheFirstArgument() throws {
        let program = Command("tool", options: [.value("socket", "PATH", "the socket")], stopsAtArgument: true)
        guard case .run(let parsed) = try program.parse(["--socket", "s", "run", "--json", "x"]) else {
            Issue.record("no arguments")
            return
        }
        #expect(parsed["socket"] == "s")
        #expect(parsed.rest == ["run", "--json", "x"])
    }

    /// A command with short names, as `browser-login request` declares them.
    let curlish = Command(
        "tool get", arguments: ["PATH"],
        options: [
            .value("data", "DATA", "the body", short: "d"),
            .value("header", "'NAME: VALUE'", "a header", repeatable: true, short: "H"),
            .flag("verbose", "say more", short: "v"), .flag("json", "print JSON"),
        ])

    func curlishArguments(_ args: [String]) throws -> Arguments {
        guard case .run(let parsed) = try curlish.parse(args) else { throw UsageError("help") }
        return parsed
    }

    @Test func parsesShortOptionsAsTheirLongNames() throws {
        let parsed = try curlishArguments(["-d", "@file", "/p", "-H", "A: 1", "-HB: 2", "-v", "--header=C: 3"])
        #expect(parsed["data"] == "@file")
        #expect(parsed.all("header") == ["A: 1", "B: 2", "C: 3"])
        #expect(parsed.has("verbose"))
        #expect(parsed.positionals == ["/p"])
        #expect(try curlishArguments(["-d-", "/p"])["data"] == "-")
        #expect(try curlishArguments(["-", "-d", "x"]).positionals == ["-"])
    }

    @Test func reportsShortOptionMistakes() {
        func failure(_ args: [String]) -> String? {
            do {
                _ = try curlish.parse(args)
                return nil
            } catch { return error.message }
        }
        #expect(failure(["/p", "-x"]) == "unknown option -x; see --help")
        #expect(failure(["/p", "-vx"]) == "unknown option -vx; see --help")
        #expect(failure(["/p", "-d"]) == "-d needs a value")
        #expect(failure(["/p", "-D", "x"]) == "unknown option -D; see --help")
    }

    @Test func shortHelpAnywhereAndShortNamesInTheHelp() throws {
        guard case .help = try curlish.parse(["/p", "-d", "x", "-h"]) else {
            Issue.record("-h did not ask for help")
            return
        }
        #expect(curlish.usage == "tool get PATH [-d DATA] [-H 'NAME: VALUE']... [-v] [--json]")
        #expect(curlish.help.contains("\n  -d, --data DATA             the body\n"))
        #expect(curlish.help.contains("\n  -H, --header 'NAME: VALUE'  a header\n"))
        #expect(curlish.help.contains("\n  --json                      print JSON\n"))
        #expect(curlish.help.hasSuffix("\n  -h, --help                  this help"))
    }

    @Test func theManualPartsComeFromTheSameDeclarations() {
        #expect(
            curlish.manualUsage(dropping: "tool ")
                == ".TP\n.B get \\fIPATH\\fR \\fR[\\fB\\-d \\fIDATA\\fR] \\fR[\\fB\\-H \\fI'NAME: VALUE'\\fR]..."
                + " \\fR[\\fB\\-v\\fR] \\fR[\\fB\\-\\-json\\fR]")
        let options = curlish.manualOptions(nested: true).split(separator: "\n")
        #expect(options.first == ".RS" && options.last == ".RE")
        #expect(curlish.manualOptions().split(separator: "\n") == options.dropFirst().dropLast())
        #expect(options.contains(#".BI "\-d, \-\-data " DATA"#))
        #expect(options.contains("a header"))
        #expect(options.contains(".B \\-v, \\-\\-verbose"))
        // Running text that would read as a request, and backslashes, are escaped.
        let odd = Command("odd", options: [.flag("dot", ".hidden \\n stays text")])
        #expect(odd.manualOptions().hasSuffix("\n\\&.hidden \\en stays text"))
    }
}
