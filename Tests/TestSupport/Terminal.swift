import Foundation

/// Runs a program to its end with a terminal as its standard input, output
/// and error, as when a person runs it: util-linux's `script(1)` (Debian's
/// essential bsdutils) gives it a pseudo-terminal and copies what the
/// terminal shows. Answers the program's exit status and that output, the
/// terminal's `\r\n` line ends as `\n`. For what a program does differently
/// on a terminal (`isatty`): prefixes, a final newline, a QR code.
public func runInTerminal(
    _ executable: String, _ arguments: [String], environment: [String: String], timeout: Double = 60
) throws -> (status: Int32, output: String) {
    let command = ([executable] + arguments).map(shellQuoted).joined(separator: " ")
    let result = try runProgram(
        "/usr/bin/script", ["--quiet", "--return", "--command", command, "/dev/null"], environment: environment,
        timeout: timeout)
    return (result.status, result.out.replacingOccurrences(of: "\r\n", with: "\n"))
}

/// `text` as one word for sh: in single quotes, a single quote as `'\''`.
public func shellQuoted(_ text: String) -> String {
    "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
}
