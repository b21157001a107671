import BrokerCore
import SystemSupport

/// Client binding (docs/rpc.md): a client file's `Peers=` names the local programs
/// that may use it — Flatpak app ids (from `/proc/PID/root/.flatpak-info`)
/// or absolute executable paths (from `/proc/PID/exe`).
package enum PeerBinding {
    package struct Identity: Sendable, Equatable {
        var executable: String?
        var flatpakId: String?
    }

    package static func identity(pid: Int32) -> Identity {
        let exe = ProcFS.executable(pid: pid)
        var flatpak: String?
        if let info = ProcFS.read("root/.flatpak-info", pid: pid) {
            var inApplication = false
            for line in info.split(separator: "\n") {
                let trimmed = line.trimmingBlanks()
                if trimmed.hasPrefix("[") {
                    inApplication = trimmed == "[Application]"
                } else if inApplication, trimmed.hasPrefix("name=") {
                    flatpak = String(trimmed.dropFirst(5))
                }
            }
        }
        return Identity(executable: exe, flatpakId: flatpak)
    }

    package static func mayUse(_ client: ClientConfig, pid: Int32) -> Bool {
        guard !client.peers.isEmpty else { return true }
        return mayUse(client, identity(pid: pid))
    }

    package static func mayUse(_ client: ClientConfig, _ identity: Identity) -> Bool {
        mayUse(peers: client.peers, identity)
    }

    /// Whether `identity` is one of `peers` (none: anyone).
    package static func mayUse(peers: [String], _ identity: Identity) -> Bool {
        peers.isEmpty
            || peers.contains { peer in
                peer.hasPrefix("/") ? identity.executable == peer : identity.flatpakId == peer
            }
    }
}
