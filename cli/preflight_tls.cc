#include "cli/preflight_tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/internal/openssl_ptr.h"
#include "fl/common/file_util.h"

namespace fl::cli::preflight {
namespace {

using fl::internal::BioPtr;
using fl::internal::EvpPkeyPtr;
using fl::internal::GeneralNamesPtr;
using fl::internal::SslCtxPtr;
using fl::internal::SslPtr;
using fl::internal::X509Ptr;
using fl::internal::X509StoreCtxPtr;
using fl::internal::X509StorePtr;

// A socket closed on destruction.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// OpenSSL's queued errors as one string ("" when none), clearing the queue.
std::string OpenSslErrors() {
  std::string all;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!all.empty()) all += "; ";
    all += buf;
  }
  return all;
}

absl::StatusOr<std::string> Read(const std::string& path) { return fl::ReadFile(path); }

// Every certificate of a PEM text; INVALID_ARGUMENT naming `path` when there is none.
absl::StatusOr<std::vector<X509Ptr>> ParseCertificates(const std::string& pem,
                                                       const std::string& path) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::vector<X509Ptr> certs;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certs.emplace_back(x);
  ERR_clear_error();  // the end of the text reads as an error
  if (certs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " holds no PEM certificate"));
  }
  return certs;
}

absl::StatusOr<X509Ptr> LoadCertificate(const std::string& path) {
  absl::StatusOr<std::string> pem = Read(path);
  if (!pem.ok()) return pem.status();
  absl::StatusOr<std::vector<X509Ptr>> certs = ParseCertificates(*pem, path);
  if (!certs.ok()) return certs.status();
  return std::move(certs->front());
}

absl::StatusOr<EvpPkeyPtr> LoadKey(const std::string& path) {
  absl::StatusOr<std::string> pem = Read(path);
  if (!pem.ok()) return pem.status();
  BioPtr bio(BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size())));
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat(path, " holds no PEM private key (or an encrypted one)"));
  }
  return key;
}

std::string CommonName(const X509_NAME* name) {
  char buf[256] = {};
  const int n =
      X509_NAME_get_text_by_NID(const_cast<X509_NAME*>(name), NID_commonName, buf, sizeof(buf));
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
}

absl::Time ToTime(const ASN1_TIME* t) {
  std::tm tm{};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return absl::InfinitePast();
  return absl::FromTimeT(timegm(&tm));
}

CertInfo InfoOf(X509* x) {
  CertInfo info;
  info.subject_cn = CommonName(X509_get_subject_name(x));
  info.issuer_cn = CommonName(X509_get_issuer_name(x));
  info.not_before = ToTime(X509_get0_notBefore(x));
  info.not_after = ToTime(X509_get0_notAfter(x));
  GeneralNamesPtr names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names.get(), i);
    if (n->type == GEN_DNS) {
      const ASN1_STRING* s = n->d.dNSName;
      info.names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                              static_cast<size_t>(ASN1_STRING_length(s)));
    } else if (n->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* s = n->d.iPAddress;
      char buf[INET6_ADDRSTRLEN] = {};
      const int len = ASN1_STRING_length(s);
      if ((len == 4 || len == 16) &&
          inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(s), buf, sizeof(buf))) {
        info.names.emplace_back(buf);
      }
    }
  }
  return info;
}

bool IsIpLiteral(const std::string& host) {
  in6_addr a6{};
  in_addr a4{};
  return inet_pton(AF_INET, host.c_str(), &a4) == 1 || inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

// Connects to each resolved address in turn; the first connected socket, blocking, with
// `timeout` on reads and writes, and its numeric address in `peer`.
absl::StatusOr<Fd> Connect(const std::string& host, const std::string& port, absl::Duration timeout,
                           std::string& peer) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::NotFoundError(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  // The deleter takes any C free function, not only OpenSSL's.
  std::unique_ptr<addrinfo, fl::internal::OpenSslDeleter<freeaddrinfo>> list(found);
  std::string why;
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    char numeric[NI_MAXHOST] = {};
    getnameinfo(ai->ai_addr, ai->ai_addrlen, numeric, sizeof(numeric), nullptr, 0, NI_NUMERICHOST);
    Fd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (fd.get() < 0) {
      why = std::strerror(errno);
      continue;
    }
    int err = 0;
    if (connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd.get(), POLLOUT, 0};
        const int ready = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
        socklen_t len = sizeof(err);
        if (ready == 0) {
          err = ETIMEDOUT;
        } else if (ready < 0 || getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
          err = errno;
        }
      }
    }
    if (err != 0) {
      why = absl::StrCat(numeric, ": ", std::strerror(err));
      continue;
    }
    fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
    const timeval tv = absl::ToTimeval(timeout);
    setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    peer = numeric;
    return fd;
  }
  return absl::UnavailableError(
      absl::StrCat("cannot connect to ", host, " port ", port, " (", why, ")"));
}

// The server's leaf certificate as the verification saw it (also when it failed).
struct Seen {
  X509Ptr leaf;
};

int RememberLeaf(int ok, X509_STORE_CTX* ctx) {
  SSL* ssl =
      static_cast<SSL*>(X509_STORE_CTX_get_ex_data(ctx, SSL_get_ex_data_X509_STORE_CTX_idx()));
  Seen* seen = ssl == nullptr ? nullptr : static_cast<Seen*>(SSL_get_app_data(ssl));
  if (seen != nullptr && seen->leaf == nullptr) {
    if (X509* leaf = X509_STORE_CTX_get0_cert(ctx); leaf != nullptr && X509_up_ref(leaf) == 1) {
      seen->leaf.reset(leaf);
    }
  }
  return ok;
}

}  // namespace

absl::StatusOr<CertInfo> ReadCertificate(const std::string& path) {
  absl::StatusOr<X509Ptr> cert = LoadCertificate(path);
  if (!cert.ok()) return cert.status();
  return InfoOf(cert->get());
}

absl::Status CheckKeyMatches(const std::string& cert_path, const std::string& key_path) {
  absl::StatusOr<X509Ptr> cert = LoadCertificate(cert_path);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<EvpPkeyPtr> key = LoadKey(key_path);
  if (!key.ok()) return key.status();
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat(key_path, " is not the private key of ", cert_path));
  }
  return absl::OkStatus();
}

absl::Status CheckChain(const std::string& cert_path, const std::string& ca_path) {
  absl::StatusOr<X509Ptr> cert = LoadCertificate(cert_path);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> ca_pem = Read(ca_path);
  if (!ca_pem.ok()) return ca_pem.status();
  absl::StatusOr<std::vector<X509Ptr>> cas = ParseCertificates(*ca_pem, ca_path);
  if (!cas.ok()) return cas.status();
  X509StorePtr store(X509_STORE_new());
  for (const X509Ptr& ca : *cas) X509_STORE_add_cert(store.get(), ca.get());
  X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (X509_STORE_CTX_init(ctx.get(), store.get(), cert->get(), nullptr) != 1 ||
      X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT) != 1) {
    return absl::InternalError(absl::StrCat("cannot set up X509_verify_cert: ", OpenSslErrors()));
  }
  // The dates are the validity check's to report.
  X509_STORE_CTX_set_flags(ctx.get(), X509_V_FLAG_NO_CHECK_TIME);
  if (X509_verify_cert(ctx.get()) == 1) return absl::OkStatus();
  const int error = X509_STORE_CTX_get_error(ctx.get());
  ERR_clear_error();
  return absl::UnauthenticatedError(X509_verify_cert_error_string(error));
}

absl::StatusOr<std::pair<std::string, std::string>> SplitHostPort(const std::string& address) {
  std::string rest = address;
  for (const char* scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (rest.rfind(scheme, 0) == 0) {
      rest = rest.substr(std::strlen(scheme));
      break;
    }
  }
  std::string host, port;
  if (!rest.empty() && rest[0] == '[') {
    const size_t close = rest.find(']');
    if (close != std::string::npos && close + 1 < rest.size() && rest[close + 1] == ':') {
      host = rest.substr(1, close - 1);
      port = rest.substr(close + 2);
    }
  } else if (const size_t colon = rest.find(':');
             colon != std::string::npos && rest.find(':', colon + 1) == std::string::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty() || port.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("server address '", address, "' is not host:port"));
  }
  return std::pair{host, port};
}

absl::StatusOr<std::string> ProbeTcp(const std::string& host, const std::string& port,
                                     absl::Duration timeout) {
  std::string peer;
  absl::StatusOr<Fd> fd = Connect(host, port, timeout, peer);
  if (!fd.ok()) return fd.status();
  return peer;
}

absl::StatusOr<TlsResult> ProbeTls(const TlsProbe& probe) {
  absl::StatusOr<X509Ptr> cert = LoadCertificate(probe.cert_path);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<EvpPkeyPtr> key = LoadKey(probe.key_path);
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> ca_pem = Read(probe.ca_path);
  if (!ca_pem.ok()) return ca_pem.status();
  absl::StatusOr<std::vector<X509Ptr>> cas = ParseCertificates(*ca_pem, probe.ca_path);
  if (!cas.ok()) return cas.status();

  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  if (ctx == nullptr) return absl::InternalError(absl::StrCat("SSL_CTX_new: ", OpenSslErrors()));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  for (const X509Ptr& ca : *cas) X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx.get()), ca.get());
  if (SSL_CTX_use_certificate(ctx.get(), cert->get()) != 1 ||
      SSL_CTX_use_PrivateKey(ctx.get(), key->get()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot use this site's certificate and key: ", OpenSslErrors()));
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, RememberLeaf);
  static constexpr unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx.get(), kAlpn, sizeof(kAlpn));

  std::string peer;
  absl::StatusOr<Fd> fd = Connect(probe.host, probe.port, probe.timeout, peer);
  if (!fd.ok()) return fd.status();
  SslPtr ssl(SSL_new(ctx.get()));
  Seen seen;
  SSL_set_app_data(ssl.get(), &seen);
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl.get());
  // As gRPC: the subjectAltNames only, never the common name.
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NEVER_CHECK_SUBJECT);
  if (IsIpLiteral(probe.expected_name)) {
    X509_VERIFY_PARAM_set1_ip_asc(param, probe.expected_name.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, probe.expected_name.c_str(), 0);
    SSL_set_tlsext_host_name(ssl.get(), probe.expected_name.c_str());
  }
  SSL_set_fd(ssl.get(), fd->get());
  if (SSL_connect(ssl.get()) != 1) {
    const long verify = SSL_get_verify_result(ssl.get());
    const std::string errors = OpenSslErrors();
    if (verify != X509_V_OK && seen.leaf != nullptr) {
      const CertInfo server = InfoOf(seen.leaf.get());
      if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH) {
        return absl::UnauthenticatedError(
            absl::StrCat("the server's certificate (CN=", server.subject_cn, ") is valid for ",
                         server.names.empty() ? "no name" : absl::StrJoin(server.names, ", "),
                         ", not for '", probe.expected_name, "'"));
      }
      return absl::UnauthenticatedError(absl::StrCat(
          "the server's certificate (CN=", server.subject_cn, ", issued by CN=", server.issuer_cn,
          ") does not verify against the CA in ", probe.ca_path,
          " (CN=", CommonName(X509_get_subject_name(cas->front().get())),
          "): ", X509_verify_cert_error_string(verify)));
    }
    return absl::UnavailableError(
        absl::StrCat("TLS handshake with ", peer, " port ", probe.port,
                     " failed: ", errors.empty() ? std::strerror(errno) : errors));
  }
  TlsResult result;
  result.version = SSL_get_version(ssl.get());
  if (X509* leaf = SSL_get0_peer_certificate(ssl.get()); leaf != nullptr) {
    result.server = InfoOf(leaf);
  }
  SSL_shutdown(ssl.get());
  return result;
}

}  // namespace fl::cli::preflight
