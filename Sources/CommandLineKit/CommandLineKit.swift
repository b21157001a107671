/// The command-line parser of all four programs: a program declares its
/// options, flags and positional arguments with their help text; the parser
/// checks a command line against them and writes `--help`.
///
/// Syntax: `--name VALUE` or `--name=VALUE` for an option, `--flag`; an
/// option or flag declared with a short name also as `-n VALUE` or `-nVALUE`
/// (`-f` for a flag; short names are not bundled); `--` ends the options,
/// `-h`/`--help` anywhere before it asks for help. Anything else (`-` too)
/// is a positional argument.

/// One option (with a value) or flag (without).
public struct Option: Sendable {
    public let name: String
    /// The value's placeholder (`PATH`); nil for a flag.
    public let value: String?
    public let help: String
    /// Given more than once, every value is kept (else the last one counts).
    public let repeatable: Bool
    /// The one-letter name (`d` for `-d`), if any; `h` is help's.
    public let short: Character?

    public static func flag(_ name: String, _ help: String, short: Character? = nil) -> Option {
        Option(name: name, value: nil, help: help, repeatable: false, short: short)
    }

    public static func value(
        _ name: String, _ placeholder: String, _ help: String, repeatable: Bool = false, short: Character? = nil
    ) -> Option {
        Option(name: name, value: placeholder, help: help, repeatable: repeatable, short: short)
    }

    /// `-d DATA`, else `--data DATA`: in a usage line.
    var synopsis: String { (short.map { "-\($0)" } ?? "--" + name) + (value.map { " " + $0 } ?? "") }

    /// `-d, --data DATA`: in the option table.
    var tableName: String { (short.map { "-\($0), " } ?? "") + "--" + name + (value.map { " " + $0 } ?? "") }
}

/// A command-line mistake: the program prints the message and exits 64 (sysexits' EX_USAGE).
public struct UsageError: Error, Sendable, Equatable {
    public var message: String
    public init(_ message: String) { self.message = message }
    /// sysexits(3) EX_USAGE.
    public static let exitStatus: Int32 = 64
}

/// One command: a program, or one of its subcommands.
public struct Command: Sendable {
    /// The words that run it (`browser-login status`).
    public let name: String
    /// One line for a list of commands.
    public let summary: String
    /// Placeholders of the positional arguments, each required once.
    public let arguments: [String]
    public let options: [Option]
    /// Before the option table.
    public let description: String
    /// After the option table.
    public let epilogue: String?
    /// The synopsis when not generated from the declarations.
    public let synopsis: String?
    /// The first line of `--help`, above the usage.
    public let title: String?
    /// The line above the option table.
    public let optionsTitle: String?
    /// With `true`, the first positional argument ends the options: it and
    /// everything after it are returned in `rest` (a subcommand and its own).
    public let stopsAtArgument: Bool

    public init(
        _ name: String, summary: String = "", arguments: [String] = [], options: [Option] = [],
        description: String = "", epilogue: String? = nil, synopsis: String? = nil, title: String? = nil,
        optionsTitle: String? = nil, stopsAtArgument: Bool = false
    ) {
        self.optionsTitle = optionsTitle
        self.name = name
        self.summary = summary
        self.arguments = arguments
        self.options = options
        self.description = description
        self.epilogue = epilogue
        self.synopsis = synopsis
        self.title = title
        self.stopsAtArgument = stopsAtArgument
    }

    /// `browser-login status [--all] [--client ID]`.
    public var usage: String {
        synopsis
            ?? ([name] + arguments + options.map { "[\($0.synopsis)]" + ($0.repeatable ? "..." : "") })
            .joined(separator: " ")
    }

    /// The text of `--help` (the option table and a generated synopsis wrapped to 80 columns).
    public var help: String {
        let table = Self.table(options.map { ($0.tableName, $0.help) } + [("-h, --help", "this help")])
        // A generated synopsis is one line: wrapped, its continuation indented.
        let usage =
            synopsis.map { "Usage: " + $0 }
            ?? Self.wrap("Usage: " + usage, columns: 80, continuation: 80 - 8).joined(
                separator: "\n" + String(repeating: " ", count: 8))
        let parts = [
            title, usage, description.isEmpty ? nil : description, (optionsTitle.map { $0 + "\n" } ?? "") + table,
            epilogue,
        ]
        return parts.compactMap { $0 }.joined(separator: "\n\n")
    }

    /// Two columns: names, and their text wrapped to 80 columns.
    public static func table(_ rows: [(String, String)]) -> String {
        let width = rows.map(\.0.count).max() ?? 0
        let indent = String(repeating: " ", count: width + 4)
        return rows.map { left, text in
            "  " + left + String(repeating: " ", count: width - left.count) + "  "
                + wrap(text, columns: max(40, 80 - indent.count)).joined(separator: "\n" + indent)
        }.joined(separator: "\n")
    }

    /// `text` in lines of at most `columns` characters, `continuation` for
    /// the lines after the first (room for their indent); a longer word stays whole.
    static func wrap(_ text: String, columns: Int, continuation: Int? = nil) -> [String] {
        var lines: [String] = []
        for word in text.split(separator: " ") {
            let limit = lines.count <= 1 ? columns : (continuation ?? columns)
            if let last = lines.last, last.count + 1 + word.count <= limit {
                lines[lines.count - 1] += " " + word
            } else {
                lines.append(String(word))
            }
        }
        return lines
    }

    /// The result of parsing: help asked for, or the arguments.
    public enum Parsed: Sendable {
        case help
        case run(Arguments)
    }

    public func parse(_ args: [String]) throws(UsageError) -> Parsed {
        // Help wins over any mistake (a program with subcommands meets it in order).
        if !stopsAtArgument && args.prefix(while: { $0 != "--" }).contains(where: { $0 == "--help" || $0 == "-h" }) {
            return .help
        }
        var parsed = Arguments()
        var i = 0
        var onlyArguments = false
        while i < args.count {
            let arg = args[i]
            i += 1
            if onlyArguments || !arg.hasPrefix("-") || arg == "-" {
                if stopsAtArgument {
                    parsed.rest = Array(args[(i - 1)...])
                    break
                }
                parsed.positionals.append(arg)
                continue
            }
            if arg == "--" {
                onlyArguments = true
                continue
            }
            if arg == "--help" || arg == "-h" { return .help }
            if !arg.hasPrefix("--") {
                try parseShort(arg, args, &i, into: &parsed)
                continue
            }
            var name = String(arg.drop { $0 == "-" })
            var inline: String?
            if let eq = name.firstIndex(of: "=") {
                inline = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            guard arg.hasPrefix("--"), let option = options.first(where: { $0.name == name }),
                option.value != nil || inline == nil
            else { throw UsageError("unknown option \(arg.hasPrefix("--") ? "--" + name : arg); see --help") }
            guard option.value != nil else {
                parsed.flags.insert(name)
                continue
            }
            if inline == nil {
                guard i < args.count else { throw UsageError("--\(name) needs a value") }
                inline = args[i]
                i += 1
            }
            parsed.values[name, default: []].append(inline ?? "")
        }
        if !stopsAtArgument && parsed.positionals.count != arguments.count {
            if parsed.positionals.count > arguments.count {
                throw UsageError("unexpected argument '\(parsed.positionals[arguments.count])'; see --help")
            }
            let expected = arguments.count == 1 ? "exactly one " + arguments[0] : arguments.joined(separator: " ")
            throw UsageError("expected \(expected); see --help")
        }
        return .run(parsed)
    }

    /// `-n VALUE`, `-nVALUE` or `-f`.
    private func parseShort(_ arg: String, _ args: [String], _ i: inout Int, into parsed: inout Arguments)
        throws(UsageError)
    {
        let letter = arg.dropFirst().first
        guard let option = options.first(where: { $0.short != nil && $0.short == letter }) else {
            throw UsageError("unknown option \(arg); see --help")
        }
        let attached = String(arg.dropFirst(2))
        guard option.value != nil else {
            guard attached.isEmpty else { throw UsageError("unknown option \(arg); see --help") }
            parsed.flags.insert(option.name)
            return
        }
        if !attached.isEmpty {
            parsed.values[option.name, default: []].append(attached)
            return
        }
        guard i < args.count else { throw UsageError("-\(option.short.map(String.init) ?? "") needs a value") }
        parsed.values[option.name, default: []].append(args[i])
        i += 1
    }
}

/// A parsed command line.
public struct Arguments: Sendable {
    public var flags: Set<String> = []
    /// Every value of each option, in order.
    public var values: [String: [String]] = [:]
    public var positionals: [String] = []
    /// What follows the first positional argument of a command that stops there.
    public var rest: [String] = []

    public init() {}

    public func has(_ flag: String) -> Bool { flags.contains(flag) }

    /// The option's value (the last one given).
    public subscript(_ option: String) -> String? { values[option]?.last }

    public func all(_ option: String) -> [String] { values[option] ?? [] }
}

// MARK: - Manual pages

/// The parts of a manual page (man(7) macros) that come from a command's
/// declarations, so that the page and `--help` cannot say different things:
/// the usage line, and the options with the text `--help` shows.
extension Command {
    /// `.TP` and the usage in bold, placeholders in italics, without the
    /// words of `prefix` (`browser-login `): the head of a command's entry.
    public func manualUsage(dropping prefix: String = "") -> String {
        ".TP\n" + manualUsageLine(dropping: prefix)
    }

    /// The usage line alone, in bold and italics (without `.TP`), made
    /// from the declarations (never from a `synopsis` written for `--help`).
    public func manualUsageLine(dropping prefix: String = "") -> String {
        let words = name.hasPrefix(prefix) ? String(name.dropFirst(prefix.count)) : name
        var line = ".B " + Self.troff(words)
        for argument in arguments { line += " \\fI" + Self.troff(argument) + "\\fR" }
        for option in options {
            let flag = option.short.map { "-\($0)" } ?? "--" + option.name
            let value = option.value.map { " \\fI" + Self.troff($0) } ?? ""
            line += " \\fR[\\fB" + Self.troff(flag) + value + "\\fR]" + (option.repeatable ? "..." : "")
        }
        return line
    }

    /// The SYNOPSIS of a program with several commands: each one's usage
    /// line (`manualUsageLine`), a line break between them.
    public static func manualSynopsis(_ commands: [Command]) -> String {
        commands.map { $0.manualUsageLine() }.joined(separator: "\n.br\n")
    }

    /// A command's entry in a list of commands: its usage line (without
    /// `prefix`), then its summary.
    public func manualEntry(dropping prefix: String = "") -> String {
        manualUsage(dropping: prefix) + "\n" + Self.troffText(summary)
    }

    /// The options as a list: each one's names (and value) in bold
    /// (italics), then its `--help` text; `nested` (in a command's entry)
    /// indents it under the entry.
    public func manualOptions(nested: Bool = false) -> String {
        var lines = nested ? [".RS"] : []
        for option in options {
            let names = (option.short.map { "-\($0), " } ?? "") + "--" + option.name
            var head = ".B " + Self.troff(names)
            if let value = option.value { head = ".BI \"" + Self.troff(names) + " \" " + Self.troff(value) }
            lines += [".TP", head, Self.troffText(option.help)]
        }
        return (lines + (nested ? [".RE"] : [])).joined(separator: "\n")
    }

    /// A word for troff: hyphens and backslashes escaped.
    static func troff(_ text: String) -> String {
        var out = ""
        for character in text {
            switch character {
            case "\\": out += "\\e"
            case "-": out += "\\-"
            default: out.append(character)
            }
        }
        return out
    }

    /// Running text for troff: as `troff`, and a line that would start with
    /// `.` or `'` (a request) starts with `\&`.
    static func troffText(_ text: String) -> String {
        let escaped = troff(text)
        return escaped.hasPrefix(".") || escaped.hasPrefix("'") ? "\\&" + escaped : escaped
    }
}
