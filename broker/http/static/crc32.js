// CRC-32 (IEEE 802.3, zlib's crc32) and base64 decoding, so the page checks each message's
// checksum itself instead of trusting the broker's word for it.

const TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

export function crc32(bytes) {
  let crc = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) crc = TABLE[(crc ^ bytes[i]) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

export function base64Bytes(text) {
  const binary = atob(text || "");
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

// The payload as text when it is valid UTF-8, else null (the page then shows hex).
export function utf8OrNull(bytes) {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return null;
  }
}

export function hex(bytes, max = 64) {
  const shown = Array.from(bytes.slice(0, max), (b) => b.toString(16).padStart(2, "0"));
  return shown.join(" ") + (bytes.length > max ? " …" : "");
}
