import BrowserLoginProtocol
import CCryptoLoader

/// AES-256-GCM (libcrypto's EVP interface): the file vault's authenticated
/// encryption. A 96-bit nonce, fresh from the system's random generator for
/// every seal, and a 128-bit tag appended to the ciphertext. With random
/// nonces one key seals safely far more items than a broker ever writes
/// (NIST SP 800-38D's 2^32 limit).
public enum AES256GCM {
    public static let keyLength = 32
    public static let nonceLength = 12
    public static let tagLength = 16

    public enum Failure: Error, Equatable {
        /// libcrypto failed (out of memory, no random bytes).
        case crypto(String)
        /// The tag did not verify: wrong key, changed bytes, or other associated data.
        case notAuthentic
    }

    /// Seals `plaintext`: answers the nonce and the ciphertext with its tag.
    public static func seal(_ plaintext: [UInt8], key: [UInt8], associatedData: [UInt8]) throws(Failure) -> (
        nonce: [UInt8], sealed: [UInt8]
    ) {
        precondition(key.count == keyLength)
        guard let nonce = try? Crypto.randomBytes(nonceLength) else { throw .crypto("no random bytes for the nonce") }
        guard let context = libcrypto.EVP_CIPHER_CTX_new() else { throw .crypto("EVP_CIPHER_CTX_new failed") }
        defer { libcrypto.EVP_CIPHER_CTX_free(context) }
        guard libcrypto.EVP_EncryptInit_ex(context, libcrypto.EVP_aes_256_gcm(), nil, nil, nil) == 1,
            libcrypto.EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_IVLEN, Int32(nonceLength), nil) == 1,
            libcrypto.EVP_EncryptInit_ex(context, nil, nil, key, nonce) == 1
        else { throw .crypto("AES-256-GCM could not be set up") }
        var length: Int32 = 0
        if !associatedData.isEmpty {
            guard libcrypto.EVP_EncryptUpdate(context, nil, &length, associatedData, Int32(associatedData.count)) == 1 else {
                throw .crypto("AES-256-GCM refused the associated data")
            }
        }
        var output = [UInt8](repeating: 0, count: plaintext.count + tagLength)
        var written = 0
        if !plaintext.isEmpty {
            guard libcrypto.EVP_EncryptUpdate(context, &output, &length, plaintext, Int32(plaintext.count)) == 1 else {
                throw .crypto("AES-256-GCM failed to encrypt")
            }
            written = Int(length)
        }
        let finished = output.withUnsafeMutableBufferPointer { buffer in
            libcrypto.EVP_EncryptFinal_ex(context, buffer.baseAddress! + written, &length)
        }
        guard finished == 1 else { throw .crypto("AES-256-GCM failed to finish") }
        written += Int(length)
        let tagged = output.withUnsafeMutableBufferPointer { buffer in
            libcrypto.EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(tagLength), buffer.baseAddress! + written)
        }
        guard tagged == 1, written == plaintext.count else { throw .crypto("AES-256-GCM gave no tag") }
        return (nonce, output)
    }

    /// Opens what `seal` made; `.notAuthentic` unless key, nonce, ciphertext,
    /// tag and associated data are all exactly the sealed ones.
    public static func open(_ sealed: [UInt8], nonce: [UInt8], key: [UInt8], associatedData: [UInt8]) throws(Failure)
        -> [UInt8]
    {
        precondition(key.count == keyLength)
        guard nonce.count == nonceLength, sealed.count >= tagLength else { throw .notAuthentic }
        let cipherLength = sealed.count - tagLength
        var tag = Array(sealed[cipherLength...])
        guard let context = libcrypto.EVP_CIPHER_CTX_new() else { throw .crypto("EVP_CIPHER_CTX_new failed") }
        defer { libcrypto.EVP_CIPHER_CTX_free(context) }
        guard libcrypto.EVP_DecryptInit_ex(context, libcrypto.EVP_aes_256_gcm(), nil, nil, nil) == 1,
            libcrypto.EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_IVLEN, Int32(nonceLength), nil) == 1,
            libcrypto.EVP_DecryptInit_ex(context, nil, nil, key, nonce) == 1
        else { throw .crypto("AES-256-GCM could not be set up") }
        var length: Int32 = 0
        if !associatedData.isEmpty {
            guard libcrypto.EVP_DecryptUpdate(context, nil, &length, associatedData, Int32(associatedData.count)) == 1 else {
                throw .notAuthentic
            }
        }
        var output = [UInt8](repeating: 0, count: cipherLength + tagLength)
        var written = 0
        if cipherLength > 0 {
            let ciphertext = Array(sealed[0..<cipherLength])
            guard libcrypto.EVP_DecryptUpdate(context, &output, &length, ciphertext, Int32(cipherLength)) == 1 else {
                throw .notAuthentic
            }
            written = Int(length)
        }
        guard libcrypto.EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(tagLength), &tag) == 1 else {
            throw .crypto("AES-256-GCM refused the tag")
        }
        let verified = output.withUnsafeMutableBufferPointer { buffer in
            libcrypto.EVP_DecryptFinal_ex(context, buffer.baseAddress! + written, &length)
        }
        guard verified == 1 else {
            output.resetBytes()
            throw .notAuthentic
        }
        written += Int(length)
        return Array(output[0..<written])
    }
}

/// libcrypto's functions, loaded on first use (LibCrypto).
private var libcrypto: bl_crypto_functions { LibCrypto.functions }
