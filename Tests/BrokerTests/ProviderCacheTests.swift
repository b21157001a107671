import BrowserLoginProtocol
import Testing

@testable import Broker
@testable import Engine

/// The providers' metadata in the state database (docs/providers.md): kept
/// with its fetch time, so a restarted broker (another cache on the same
/// file) finds it.
@Suite struct ProviderCacheTests {
    let scratch: ScratchDirectory
    var path: String { scratch.url.path + "/state.sqlite" }

    init() throws { scratch = try ScratchDirectory("provider-cache") }

    @Test func aSavedDocumentIsLoadedThroughAnotherCacheOnTheSameFile() {
        let issuer = "https://id.example.com/realms/main"
        let json = #"{"issuer":"https://id.example.com/realms/main","token_endpoint":"https://id.example.com/t"}"#
        let fetchedAt = Timestamp(millisecondsSince1970: 1_800_000_123_456)
        StoreMetadataCache(path: path).save(issuer: issuer, json: json, fetchedAt: fetchedAt)

        let reopened = StoreMetadataCache(path: path)
        let loaded = reopened.load(issuer: issuer)
        #expect(loaded?.json == json)
        #expect(loaded?.fetchedAt == fetchedAt)
        // Issuers are keys as written: a trailing slash is another issuer.
        #expect(reopened.load(issuer: issuer + "/") == nil)
        #expect(reopened.load(issuer: "https://other.example.com") == nil)

        // A later fetch replaces the entry.
        let later = Timestamp(millisecondsSince1970: fetchedAt.millisecondsSince1970 + 86_400_000)
        reopened.save(issuer: issuer, json: "{}", fetchedAt: later)
        let replaced = StoreMetadataCache(path: path).load(issuer: issuer)
        #expect(replaced?.json == "{}")
        #expect(replaced?.fetchedAt == later)
    }

    @Test func anIssuerNeverSavedIsNil() {
        #expect(StoreMetadataCache(path: path).load(issuer: "https://id.example.com") == nil)
    }
}
