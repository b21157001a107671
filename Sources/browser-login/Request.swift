import BrokerRPC
import BrowserLoginClient
import CommandLineKit
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// `browser-login request`: the client's API through `http.request`, for
/// scripts, in the manner of `curl -f`.
let requestCommand = Subcommand(
    "request", summary: "call the client's API with its session (like curl)",
    arguments: ["CLIENT", "METHOD", "PATH"],
    options: [
        .value("data", "DATA", "the request body: DATA, or @FILE for a file's bytes (@- standard input)", short: "d"),
        .value("header", "'NAME: VALUE'", "a request header (repeatable)", repeatable: true, short: "H"),
        .value("timeout", "SECONDS", "how long the API may take to answer (default 30, at most 120)"),
        accountOption,
        .flag("json", "print the whole answer as JSON: {status, headers, body | bodyBase64}"),
    ],
    help: """
        Sends METHOD (GET, HEAD, POST, PUT, PATCH, DELETE) PATH to CLIENT's API
        with its session: the broker adds the token, which never reaches this
        command. PATH is an absolute path; a query (?a=1&b=2) is split off and
        sent as the request's query. The answer's body is written to standard
        output as it came (bytes), with nothing added; only on a terminal, a
        body that does not end with a newline gets one.

        With -d and no Content-Type header, the body is sent as
        application/json when it is a JSON text, else as
        application/octet-stream. Authorization, Cookie and Host headers are
        refused, as are paths with '..' (exit status 64).

        Exit status 0 for a 2xx answer; 22 for any other HTTP status (as curl -f;
        the body is still written, and "HTTP_ERROR: the API answered HTTP
        STATUS" reported on stderr); 1 when
        the client is not signed in (NOT_SIGNED_IN); else as the other commands.
        --account sends it as that account of the client rather than the current one.
        """,
    run: { args, broker in
        let (client, method, target) = (args.positionals[0], args.positionals[1].uppercased(), args.positionals[2])
        let (path, query) = try splitQuery(target)
        var headers = try parseHeaders(args.all("header"))
        var body: [UInt8]?
        if let data = args["data"] {
            body = try readData(data)
            if let body, !headers.keys.contains(where: { $0.lowercased() == "content-type" }) {
                let isJSON = (try? JSONValue.parse(body)) != nil
                headers["Content-Type"] = isJSON ? "application/json" : "application/octet-stream"
            }
        }
        let timeout = try timeoutOption(args)
        var params = BrowserLoginClient.requestParams(
            client, method, path, query, headers.isEmpty ? nil : headers, body, timeout)
        params.account = args["account"]
        let raw = try await broker.call(
            .httpRequest, params: encode(params), timeout: (timeout ?? .seconds(30)) + .seconds(30))
        let response = try HTTPResponse(try decode(raw, as: HTTPResponseResult.self))
        if args.has("json") {
            printJSON(raw)
        } else {
            FileHandle.standardOutput.write(Data(bodyForOutput(response.body, terminal: isatty(1) == 1)))
        }
        guard response.isSuccess else {
            var failure = CLIError(
                "HTTP_ERROR", "the API answered HTTP \(response.status)", .httpError,
                data: ["status": .integer(Int64(response.status))])
            failure.text = "HTTP_ERROR: " + failure.message
            writeError(failure)
            return .httpError
        }
        return .ok
    })

/// The body as `request` writes it: to a pipe or a file exactly as it came
/// (a script or `> file` gets the API's bytes); to a terminal with a newline
/// after a non-empty body that does not end with one, so the prompt or the
/// next line (HTTP_ERROR on standard error) starts on a line of its own.
func bodyForOutput(_ body: [UInt8], terminal: Bool) -> [UInt8] {
    guard terminal, let last = body.last, last != 0x0A else { return body }
    return body + [0x0A]
}

/// `/a/b?x=1&y=2` as `/a/b` and `["x": "1", "y": "2"]` (percent-decoded: the broker encodes them again).
func splitQuery(_ target: String) throws -> (path: String, query: [String: String]?) {
    guard let mark = target.firstIndex(of: "?") else { return (target, nil) }
    var query: [String: String] = [:]
    for pair in target[target.index(after: mark)...].split(separator: "&") {
        let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        guard let name = parts[0].removingPercentEncoding, !name.isEmpty,
            let value = (parts.count > 1 ? String(parts[1]) : "").removingPercentEncoding
        else { throw CLIError("USAGE", "the query of '\(target)' cannot be read", .usage) }
        guard query[name] == nil else {
            throw CLIError("USAGE", "the query parameter '\(name)' is given twice (the broker takes each once)", .usage)
        }
        query[name] = value
    }
    return (String(target[..<mark]), query.isEmpty ? nil : query)
}

/// `-H 'Name: value'` options as a header map (a repeated name's values joined with `, `).
func parseHeaders(_ lines: [String]) throws -> [String: String] {
    var headers: [String: String] = [:]
    for line in lines {
        guard let colon = line.firstIndex(of: ":"), colon != line.startIndex else {
            throw CLIError("USAGE", "-H '\(line)' is not 'Name: value'", .usage)
        }
        let name = String(line[..<colon]).trimmingCharacters(in: .whitespaces)
        let value = String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
        let key = headers.keys.first { $0.lowercased() == name.lowercased() } ?? name
        headers[key] = headers[key].map { $0 + ", " + value } ?? value
    }
    return headers
}

/// `-d`'s body: the text itself, or `@FILE`'s bytes, or standard input for `@-`.
func readData(_ data: String) throws -> [UInt8] {
    guard data.hasPrefix("@") else { return Array(data.utf8) }
    let file = String(data.dropFirst())
    if file == "-" { return Array(FileHandle.standardInput.readDataToEndOfFile()) }
    guard let bytes = FileManager.default.contents(atPath: file) else {
        throw CLIError("NO_INPUT", "cannot read '\(file)' (-d @FILE)", .noInput)
    }
    return Array(bytes)
}
