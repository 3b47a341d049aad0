#include "fl/aggregation/secagg/primitives.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace fl::secagg {
namespace {

constexpr size_t kNonceBytes = kAesGcmNonceBytes;
constexpr size_t kTagBytes = kAesGcmTagBytes;

std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "no OpenSSL error";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

absl::Status Internal(std::string_view what) {
  return absl::InternalError(absl::StrCat(std::string(what), ": ", OpenSslError()));
}

struct CipherCtxDeleter {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxDeleter>;
struct PkeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyDeleter>;
struct PkeyCtxDeleter {
  void operator()(EVP_PKEY_CTX* c) const { EVP_PKEY_CTX_free(c); }
};
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, PkeyCtxDeleter>;

// XORs an AES-256-CTR stream (zero IV) into `data`; on a zeroed buffer this writes the stream.
absl::Status CtrStream(const Key32& key, uint8_t* data, size_t size) {
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  if (!ctx) return Internal("EVP_CIPHER_CTX_new");
  const uint8_t iv[16] = {};
  if (EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_ctr(), nullptr, key.data(), iv) != 1) {
    return Internal("AES-256-CTR init");
  }
  constexpr size_t kBlock = size_t{1} << 30;  // EVP lengths are int
  for (size_t off = 0; off < size; off += kBlock) {
    const int len = static_cast<int>(std::min(kBlock, size - off));
    int out_len = 0;
    if (EVP_EncryptUpdate(ctx.get(), data + off, &out_len, data + off, len) != 1) {
      return Internal("AES-256-CTR update");
    }
  }
  return absl::OkStatus();
}

class OsRandomSource final : public RandomSource {
 public:
  absl::Status Fill(std::span<uint8_t> out) override {
    constexpr size_t kMax = size_t{1} << 30;
    for (size_t off = 0; off < out.size(); off += kMax) {
      const int len = static_cast<int>(std::min(kMax, out.size() - off));
      if (RAND_bytes(out.data() + off, len) != 1) return Internal("RAND_bytes");
    }
    return absl::OkStatus();
  }
};

// AES-256-CTR over a running 128-bit counter IV, so successive Fill calls continue the stream.
class DeterministicRandomSource final : public RandomSource {
 public:
  explicit DeterministicRandomSource(uint64_t seed) {
    uint8_t material[22] = {'f', 'l', '-', 's', 'e', 'c', 'a', 'g', 'g', '-', 't', 'e', 's', 't'};
    std::memcpy(material + 14, &seed, sizeof(seed));
    SHA256(material, sizeof(material), key_.data());
  }
  absl::Status Fill(std::span<uint8_t> out) override {
    if (out.empty()) return absl::OkStatus();
    // Each call uses a fresh 2^64-block region of the key stream: IV = call counter || 0.
    CipherCtx ctx(EVP_CIPHER_CTX_new());
    uint8_t iv[16] = {};
    std::memcpy(iv, &calls_, sizeof(calls_));
    ++calls_;
    if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_ctr(), nullptr, key_.data(), iv) != 1) {
      return Internal("deterministic source init");
    }
    std::memset(out.data(), 0, out.size());
    int len = 0;
    if (EVP_EncryptUpdate(ctx.get(), out.data(), &len, out.data(), static_cast<int>(out.size())) !=
        1) {
      return Internal("deterministic source update");
    }
    return absl::OkStatus();
  }

 private:
  Key32 key_{};
  uint64_t calls_ = 0;
};

absl::StatusOr<Pkey> RawPrivate(const Key32& private_key) {
  Pkey key(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, private_key.data(),
                                        private_key.size()));
  if (!key) return Internal("X25519 private key");
  return key;
}

}  // namespace

std::unique_ptr<RandomSource> MakeOsRandomSource() { return std::make_unique<OsRandomSource>(); }

std::unique_ptr<RandomSource> MakeDeterministicRandomSource(uint64_t seed) {
  return std::make_unique<DeterministicRandomSource>(seed);
}

void Wipe(std::span<uint8_t> secret) { OPENSSL_cleanse(secret.data(), secret.size()); }

absl::StatusOr<Key32> X25519PublicFromPrivate(const Key32& private_key) {
  absl::StatusOr<Pkey> key = RawPrivate(private_key);
  if (!key.ok()) return key.status();
  Key32 pub{};
  size_t len = pub.size();
  if (EVP_PKEY_get_raw_public_key(key->get(), pub.data(), &len) != 1 || len != pub.size()) {
    return Internal("X25519 public key");
  }
  return pub;
}

absl::StatusOr<X25519KeyPair> GenerateX25519KeyPair(RandomSource& rng) {
  X25519KeyPair pair{};
  if (absl::Status s = rng.Fill(pair.private_key); !s.ok()) return s;
  absl::StatusOr<Key32> pub = X25519PublicFromPrivate(pair.private_key);
  if (!pub.ok()) return pub.status();
  pair.public_key = *pub;
  return pair;
}

absl::StatusOr<Key32> X25519Agree(const Key32& private_key, const Key32& peer_public) {
  absl::StatusOr<Pkey> key = RawPrivate(private_key);
  if (!key.ok()) return key.status();
  Pkey peer(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, peer_public.data(),
                                        peer_public.size()));
  if (!peer) return Internal("X25519 peer public key");
  PkeyCtx ctx(EVP_PKEY_CTX_new(key->get(), nullptr));
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1) return Internal("X25519 derive init");
  if (EVP_PKEY_derive_set_peer(ctx.get(), peer.get()) != 1) {
    return Internal("X25519 derive set peer");
  }
  Key32 secret{};
  size_t len = secret.size();
  if (EVP_PKEY_derive(ctx.get(), secret.data(), &len) != 1 || len != secret.size()) {
    // OpenSSL refuses an all-zero result (a low-order peer point).
    return absl::InvalidArgumentError(
        absl::StrCat("X25519 agreement failed (low-order peer public key?): ", OpenSslError()));
  }
  return secret;
}

absl::StatusOr<Bytes> HkdfSha256(std::span<const uint8_t> ikm, std::span<const uint8_t> salt,
                                 std::span<const uint8_t> info, size_t length) {
  if (length == 0 || length > 255 * 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("HKDF-SHA256 output length must be in [1, 8160], got ", length));
  }
  PkeyCtx ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1 ||
      EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) != 1 ||
      // An empty salt is HKDF's default (HashLen zeros); OpenSSL refuses a null one.
      (!salt.empty() &&
       EVP_PKEY_CTX_set1_hkdf_salt(ctx.get(), salt.data(), static_cast<int>(salt.size())) != 1) ||
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), ikm.data(), static_cast<int>(ikm.size())) != 1 ||
      (!info.empty() &&
       EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), info.data(), static_cast<int>(info.size())) != 1)) {
    return Internal("HKDF-SHA256 setup");
  }
  Bytes out(length);
  size_t len = length;
  if (EVP_PKEY_derive(ctx.get(), out.data(), &len) != 1 || len != length) {
    return Internal("HKDF-SHA256 derive");
  }
  return out;
}

absl::StatusOr<Key32> DeriveKey(const Key32& shared_secret, std::string_view info) {
  absl::StatusOr<Bytes> okm = HkdfSha256(
      shared_secret, {}, std::span(reinterpret_cast<const uint8_t*>(info.data()), info.size()), 32);
  if (!okm.ok()) return okm.status();
  Key32 key{};
  std::memcpy(key.data(), okm->data(), key.size());
  return key;
}

absl::StatusOr<Bytes> AesGcmEncrypt(const Key32& key, std::span<const uint8_t> plaintext,
                                    std::span<const uint8_t> aad, RandomSource& rng) {
  if (plaintext.size() > static_cast<size_t>(std::numeric_limits<int>::max()) - 64) {
    return absl::InvalidArgumentError("AES-256-GCM plaintext too large");
  }
  Bytes out(kNonceBytes + plaintext.size() + kTagBytes);
  if (absl::Status s = rng.Fill(std::span(out.data(), kNonceBytes)); !s.ok()) return s;
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) != 1 ||
      EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, key.data(), out.data()) != 1 ||
      (!aad.empty() && EVP_EncryptUpdate(ctx.get(), nullptr, &len, aad.data(),
                                         static_cast<int>(aad.size())) != 1) ||
      EVP_EncryptUpdate(ctx.get(), out.data() + kNonceBytes, &len, plaintext.data(),
                        static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), out.data() + kNonceBytes + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes,
                          out.data() + kNonceBytes + plaintext.size()) != 1) {
    return Internal("AES-256-GCM encrypt");
  }
  return out;
}

absl::StatusOr<Bytes> AesGcmDecrypt(const Key32& key, std::span<const uint8_t> sealed,
                                    std::span<const uint8_t> aad) {
  if (sealed.size() < kNonceBytes + kTagBytes) {
    return absl::InvalidArgumentError(absl::StrCat("AES-256-GCM ciphertext of ", sealed.size(),
                                                   " bytes is shorter than nonce plus tag (28)"));
  }
  const size_t body = sealed.size() - kNonceBytes - kTagBytes;
  Bytes out(body);
  uint8_t tag[kTagBytes];
  std::memcpy(tag, sealed.data() + kNonceBytes + body, kTagBytes);
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) != 1 ||
      EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr, key.data(), sealed.data()) != 1 ||
      (!aad.empty() && EVP_DecryptUpdate(ctx.get(), nullptr, &len, aad.data(),
                                         static_cast<int>(aad.size())) != 1) ||
      EVP_DecryptUpdate(ctx.get(), out.data(), &len, sealed.data() + kNonceBytes,
                        static_cast<int>(body)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, tag) != 1) {
    return Internal("AES-256-GCM decrypt");
  }
  if (EVP_DecryptFinal_ex(ctx.get(), out.data() + len, &len) != 1) {
    ERR_clear_error();
    return absl::DataLossError(
        "AES-256-GCM authentication failed: the ciphertext, nonce, tag, associated data or key "
        "is not the one sealed");
  }
  return out;
}

absl::Status PrgExpand32(const Key32& seed, std::span<uint32_t> out) {
  std::memset(out.data(), 0, out.size_bytes());
  return CtrStream(seed, reinterpret_cast<uint8_t*>(out.data()), out.size_bytes());
}

absl::Status PrgExpand64(const Key32& seed, std::span<uint64_t> out) {
  std::memset(out.data(), 0, out.size_bytes());
  return CtrStream(seed, reinterpret_cast<uint8_t*>(out.data()), out.size_bytes());
}

}  // namespace fl::secagg
