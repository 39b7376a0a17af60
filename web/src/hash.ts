// SHA-256 with WebCrypto (crypto.subtle needs a secure context: https or localhost).

/** Lowercase hex SHA-256 of data. */
export async function sha256Hex(data: Uint8Array): Promise<string> {
  const sum = new Uint8Array(await crypto.subtle.digest("SHA-256", data as Uint8Array<ArrayBuffer>));
  let s = "";
  for (const b of sum) s += b.toString(16).padStart(2, "0");
  return s;
}
