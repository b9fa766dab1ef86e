package rpcguard

// ModernProtocol is the first protocol version whose requests carry their
// version (the HTTP header, params._meta) instead of a session opened by
// initialize; both transports and the tools' answers turn on it. Versions
// are dates, so they compare as strings.
const ModernProtocol = "2026-07-28"
