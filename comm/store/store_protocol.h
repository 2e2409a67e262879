// The TCP store's wire protocol, shared by TcpStoreServer, TcpStore and the
// tests that speak it by hand. On connect the server sends a hello (magic, a
// fresh nonce); the client answers with its own nonce and a proof,
// HMAC(secret, "client" | server nonce | client nonce); the server checks the
// proof in constant time and drops the connection when it is wrong, before
// reading anything else; otherwise it answers with its own proof, which the
// client checks in turn. Each side so learns that the other holds the job's
// secret, and the secret itself never crosses the wire. Every later frame
// carries HMAC(session key, direction | sequence number | frame), the session
// key derived from both nonces: without the secret, frames can be neither
// forged, altered, replayed nor reordered. Frames are length-prefixed binary
// in host byte order (client and server are the same build).
#ifndef RINGLAB_COMM_STORE_STORE_PROTOCOL_H_
#define RINGLAB_COMM_STORE_STORE_PROTOCOL_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/store/job_secret.h"

namespace ringlab::comm::store_protocol {

inline constexpr char kMagic[] = "RLSTORE1";
inline constexpr size_t kMagicBytes = 8;
inline constexpr size_t kNonceBytes = 16;
// Server -> client: magic, server nonce.
inline constexpr size_t kHelloBytes = kMagicBytes + kNonceBytes;
// Client -> server: magic, client nonce, the client's proof.
inline constexpr size_t kClientProofBytes =
    kMagicBytes + kNonceBytes + kHmacBytes;
// Server -> client: the server's proof.
inline constexpr size_t kServerProofBytes = kHmacBytes;
inline constexpr size_t kTagBytes = kHmacBytes;

// Request: u8 op, u32 key length, u32 value length, key, value, tag.
// Reply: u8 status, u32 length, payload, tag.
// Get's value is how long the server may wait for the key, in milliseconds
// (decimal; empty: 0); Wait's key is that timeout and its value the keys,
// each followed by '\0'; a Wait that times out replies kNotFound with the
// keys still missing, in the same form.
enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kWait = 4 };
enum Status : uint8_t { kOk = 0, kNotFound = 1, kError = 2 };
inline constexpr size_t kRequestHeaderBytes = 9;
inline constexpr size_t kReplyHeaderBytes = 5;

std::string Hello(const std::string& server_nonce);
// The whole client -> server handshake message.
std::string ClientProof(const std::string& secret,
                        const std::string& server_nonce,
                        const std::string& client_nonce);
std::string ServerProof(const std::string& secret,
                        const std::string& server_nonce,
                        const std::string& client_nonce);
std::string SessionKey(const std::string& secret,
                       const std::string& server_nonce,
                       const std::string& client_nonce);

std::string RequestFrame(uint8_t op, const std::string& key,
                         const std::string& value);
std::string ReplyFrame(uint8_t status, const std::string& payload);

// The tags of one direction of one connection, numbered from 0.
class FrameTagger {
 public:
  FrameTagger(std::string session_key, const char* direction)
      : key_(std::move(session_key)), direction_(direction) {}
  // The next frame's tag (the sequence number advances).
  std::string Next(const std::string& frame);

 private:
  std::string key_;
  std::string direction_;
  uint64_t sequence_ = 0;
};
inline constexpr char kClientToServer[] = "c2s";
inline constexpr char kServerToClient[] = "s2c";

// A decimal int64 of at most 24 characters (Add's operands, timeouts).
bool ParseInt64(const std::string& s, int64_t* out);
// "<what>: <strerror(errno)>".
std::string ErrnoText(const std::string& what);

// Blocking helpers with a deadline; false (and *why) on failure, timeout or
// end of stream.
bool SendAll(int fd, const void* data, size_t n);
bool ReadExact(int fd, char* data, size_t n,
               std::chrono::steady_clock::time_point deadline,
               std::string* why);

}  // namespace ringlab::comm::store_protocol

#endif  // RINGLAB_COMM_STORE_STORE_PROTOCOL_H_
