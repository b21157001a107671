import BrowserLoginClient
import CommandLineKit
import Foundation
import SystemSupport
import VaultKey

/// `browser-login vault`: the file vault's passphrase-sealed key (docs/vault.md).
/// Everything happens here, in the user's own process: the passphrase never
/// reaches the broker, and the opened key goes straight into the kernel user
/// keyring, where the broker finds it at its next vault operation.
let vaultCommand = Subcommand(
    "vault", summary: "seal the file vault's key with a passphrase, and unlock it after a restart",
    arguments: ["ACTION"],
    options: [
        .value("passphrase-file", "PATH", "read the (current) passphrase from PATH instead of the terminal"),
        .value("new-passphrase-file", "PATH", "passphrase: read the new passphrase from PATH instead of the terminal"),
        .value("directory", "DIR", "the file vault's directory (default: the running broker's, from broker.info)"),
        json,
    ],
    help: """
        Actions, for the file vault (Vault=file in broker.conf):
          status      which vault, whether its key is sealed and whether it is locked
          passphrase  seal the vault's key with a passphrase, or change it (the
                      key is sealed again; the items are never rewritten)
          unlock      open the sealed key with the passphrase and put it in the
                      kernel user keyring, until logout or restart
          lock        take the key out of the kernel keyring (sealed vaults only)
        A sealed vault survives a restart: it is locked (the broker answers
        VAULT_LOCKED, never "signed out") until `browser-login vault unlock`.
        Passphrases are read from the terminal without echo, or from a file
        (its first line) with --passphrase-file / --new-passphrase-file.
        Exit status 0 ok, 1 nothing to do or not sealed, 64 usage, 66 no vault,
        69 the keyring cannot be reached, 77 wrong passphrase.
        """,
    run: { args, broker in
        let action = args.positionals[0]
        guard ["status", "passphrase", "unlock", "lock"].contains(action) else {
            throw CLIError("USAGE", "unknown vault action '\(action)'; use status, passphrase, unlock or lock", .usage)
        }
        let directory = try await vaultDirectory(args, broker)
        let keyring = KernelKeyring(description: VaultKeyId.description(directory: directory))
        let found = SealedKey.read(directory: directory)
        if case .unreadable(let problem) = found {
            throw CLIError("VAULT_DAMAGED", "the file vault's sealed key cannot be used: \(problem)", .dataError)
        }
        let sealed: SealedKey? = if case .sealed(let s) = found { s } else { nil }
        switch action {
        case "status":
            return vaultStatus(directory: directory, keyring: keyring, sealed: sealed, json: args.has("json"))
        case "unlock":
            guard let sealed else {
                throw CLIError(
                    "VAULT_NOT_SEALED",
                    "the file vault \(directory) has no passphrase, so there is nothing to unlock; `browser-login vault passphrase` sets one",
                    .failure)
            }
            if case .present(let key) = keyring.find(), VaultKeyId.of(key) == sealed.key {
                report("the file vault \(directory) is already unlocked", args)
                return .ok
            }
            var passphrase = try readPassphrase(file: args["passphrase-file"], prompt: "Passphrase for the file vault: ")
            defer { passphrase.resetBytes() }
            var key = try openSealed(sealed, passphrase: passphrase)
            defer { key.resetBytes() }
            if let problem = keyring.add(key) { throw CLIError("VAULT_UNAVAILABLE", problem, .unavailable) }
            report("the file vault \(directory) is unlocked until logout or restart", args)
            return .ok
        case "lock":
            guard sealed != nil else {
                throw CLIError(
                    "VAULT_NOT_SEALED",
                    "the file vault \(directory) has no passphrase: taking its key out of the keyring would lose every session; set one with `browser-login vault passphrase` first",
                    .failure)
            }
            let removed = keyring.remove()
            report(
                removed
                    ? "the file vault \(directory) is locked; `browser-login vault unlock` opens it again"
                    : "the file vault \(directory) was already locked", args)
            return .ok
        default:
            return try changePassphrase(args, directory: directory, keyring: keyring, sealed: sealed)
        }
    })

/// The vault's directory: `--directory`, else the running broker's (broker.info),
/// else the default one when no broker answers. Resolved, as the broker names its key.
private func vaultDirectory(_ args: Arguments, _ broker: BrowserLoginClient) async throws -> String {
    var directory = args["directory"]
    if directory == nil, let info: BrokerInfo = try? decode(try await broker.call(.brokerInfo, params: nil)) {
        guard info.vault == "file", let named = info.vaultDirectory else {
            throw CLIError(
                "VAULT_NOT_FILE",
                "the broker keeps its secrets in the \(info.vault) vault, not the file vault (Vault=file in broker.conf); `vault` manages the file vault",
                .failure)
        }
        directory = named
    }
    let path = directory ?? UserPaths(environment: ProcessInfo.processInfo.environment).brokerStateDirectory + "/vault"
    guard let resolved = realpath(path, nil) else {
        throw CLIError(
            "NO_INPUT", "there is no file vault at \(path) (\(String(cString: strerror(errno)))); pass --directory DIR",
            .noInput)
    }
    defer { free(resolved) }
    return String(cString: resolved)
}

private func vaultStatus(directory: String, keyring: KernelKeyring, sealed: SealedKey?, json: Bool) -> Exit {
    let lookup = keyring.find()
    let keyPresent: Bool
    switch lookup {
    case .present(let key): keyPresent = sealed.map { VaultKeyId.of(key) == $0.key } ?? true
    case .absent, .failed: keyPresent = false
    }
    let locked = sealed != nil && !keyPresent
    if json {
        var object: [String: JSONValue] = [
            "vault": "file", "directory": .string(directory), "sealed": .bool(sealed != nil), "locked": .bool(locked),
            "keyPresent": .bool(keyPresent),
        ]
        if case .failed(let problem) = lookup { object["problem"] = .string(problem) }
        printJSON(.object(object))
        return .ok
    }
    print("vault: file \(directory)")
    print("sealed with a passphrase: \(sealed != nil ? "yes" : "no (a restart loses the sessions)")")
    if case .failed(let problem) = lookup { print("keyring: \(problem)") }
    if sealed != nil {
        print(locked ? "locked: yes (run `browser-login vault unlock`)" : "locked: no")
    } else {
        print("key in the kernel keyring: \(keyPresent ? "yes" : "no")")
    }
    return .ok
}

/// `vault passphrase`: seals the vault's key (the one in the keyring, or a
/// new one when there is none) under a new passphrase; a sealed vault's
/// current passphrase opens its key first.
private func changePassphrase(_ args: Arguments, directory: String, keyring: KernelKeyring, sealed: SealedKey?) throws
    -> Exit
{
    var key: [UInt8]
    if let sealed {
        var current = try readPassphrase(file: args["passphrase-file"], prompt: "Current passphrase: ")
        defer { current.resetBytes() }
        key = try openSealed(sealed, passphrase: current)
    } else {
        switch keyring.find() {
        case .present(let present): key = present
        case .failed(let problem): throw CLIError("VAULT_UNAVAILABLE", problem, .unavailable)
        case .absent:
            // No key yet (or lost at a restart: those items are gone either way): a new one.
            guard let fresh = try? Crypto.randomBytes(KernelKeyring.keyLength) else {
                throw CLIError("INTERNAL_ERROR", "no random bytes for the vault's key", .software)
            }
            key = fresh
        }
    }
    defer { key.resetBytes() }
    var new: [UInt8]
    if let file = args["new-passphrase-file"] {
        new = try readPassphrase(file: file, prompt: "")
    } else {
        new = try readPassphrase(file: nil, prompt: "New passphrase: ")
        var again = try readPassphrase(file: nil, prompt: "New passphrase again: ")
        defer { again.resetBytes() }
        guard again == new else {
            new.resetBytes()
            throw CLIError("USAGE", "the two new passphrases differ; nothing was changed", .usage)
        }
    }
    defer { new.resetBytes() }
    guard String(decoding: new, as: UTF8.self).count >= SealedKey.minimumPassphraseCharacters else {
        throw CLIError(
            "USAGE", "the new passphrase is shorter than \(SealedKey.minimumPassphraseCharacters) characters", .usage)
    }
    let resealed: SealedKey
    do { resealed = try SealedKey.seal(key, passphrase: new) } catch {
        throw CLIError("INTERNAL_ERROR", "the vault's key could not be sealed: \(error)", .software)
    }
    if let problem = resealed.write(directory: directory) {
        throw CLIError("IO_ERROR", "the sealed key could not be written: \(problem)", .ioError)
    }
    // The key stays (or, when new, goes) in the keyring: the vault stays unlocked.
    if case .present(let present) = keyring.find(), present == key {
    } else if let problem = keyring.add(key) {
        throw CLIError("VAULT_UNAVAILABLE", problem, .unavailable)
    }
    report(
        sealed == nil
            ? "the file vault \(directory) is sealed with the passphrase: after a restart, `browser-login vault unlock` opens it"
            : "the file vault's key is sealed with the new passphrase (the items were not rewritten)", args)
    return .ok
}

private func openSealed(_ sealed: SealedKey, passphrase: [UInt8]) throws -> [UInt8] {
    do { return try sealed.open(passphrase: passphrase) } catch {
        switch error {
        case .wrongPassphrase:
            throw CLIError("WRONG_PASSPHRASE", "the passphrase does not open the file vault's key", .noPermission)
        case .damaged(let problem): throw CLIError("VAULT_DAMAGED", problem, .dataError)
        case .failed(let problem): throw CLIError("INTERNAL_ERROR", problem, .software)
        }
    }
}

private func report(_ text: String, _ args: Arguments) {
    if args.has("json") { printJSON(["message": .string(text)]) } else { print(text) }
}

/// A passphrase: the first line of `file`, or one line typed on the
/// terminal (/dev/tty) with echo off.
private func readPassphrase(file: String?, prompt: String) throws -> [UInt8] {
    var bytes: [UInt8]
    if let file {
        var status = stat()
        if stat(file, &status) == 0, status.st_mode & S_IFMT != S_IFREG || status.st_size > 64 * 1024 {
            throw CLIError("USAGE", "the passphrase file \(file) is not a small regular file", .usage)
        }
        guard let data = FileSystem.read(file) else {
            throw CLIError(
                "NO_INPUT", "cannot read the passphrase file \(file) (\(String(cString: strerror(errno))))", .noInput)
        }
        bytes = data
        if let newline = bytes.firstIndex(of: 10) { bytes.removeSubrange(newline...) }
        if bytes.last == 13 { bytes.removeLast() }
    } else {
        bytes = try readFromTerminal(prompt: prompt)
    }
    guard !bytes.isEmpty else { throw CLIError("USAGE", "the passphrase is empty", .usage) }
    guard bytes.count <= SealedKey.maximumPassphraseBytes else {
        throw CLIError("USAGE", "the passphrase is longer than \(SealedKey.maximumPassphraseBytes) bytes", .usage)
    }
    return bytes
}

private func readFromTerminal(prompt: String) throws -> [UInt8] {
    let fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
    guard fd >= 0 else {
        throw CLIError(
            "USAGE", "there is no terminal to read the passphrase from; pass --passphrase-file PATH", .usage)
    }
    defer { close(fd) }
    var saved = termios()
    let isTerminal = tcgetattr(fd, &saved) == 0
    if isTerminal {
        var quiet = saved
        quiet.c_lflag &= ~tcflag_t(ECHO)
        quiet.c_lflag |= tcflag_t(ECHONL)
        tcsetattr(fd, TCSAFLUSH, &quiet)
    }
    defer { if isTerminal { tcsetattr(fd, TCSAFLUSH, &saved) } }
    _ = prompt.utf8CString.withUnsafeBufferPointer { write(fd, $0.baseAddress, $0.count - 1) }
    var line: [UInt8] = []
    var byte: UInt8 = 0
    while line.count <= SealedKey.maximumPassphraseBytes {
        let n = read(fd, &byte, 1)
        if n < 0 && errno == EINTR { continue }
        if n <= 0 || byte == 10 { break }
        line.append(byte)
    }
    if line.last == 13 { line.removeLast() }
    return line
}
