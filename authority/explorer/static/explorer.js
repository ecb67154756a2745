// deplog explorer: local times, copy buttons, and verification in the reader's browser.
//
// The verification follows the project's Python verifiers (client/tlog/):
//  - C2SP signed-note: the note text runs to the newline before the last blank line;
//    signature lines are "— <name> base64(key ID || signature)"; a key ID is
//    SHA-256(name || 0x0A || type || public key)[:4]; type 0x01 signs the text itself.
//  - C2SP tlog-cosignature: type 0x04 lines carry an 8-byte big-endian timestamp and an
//    Ed25519 signature over "cosignature/v1\ntime <t>\n" + the note text. A witness key
//    followed by "tree-lines" (a witness that signs like litewitness) may instead have
//    signed "cosignature/v1\ntime <t>\n" + the first three lines only; the report says
//    so. Type 0x06 lines are ML-DSA-44 (tlog-cosignature v1.1): WebCrypto has no ML-DSA,
//    so they are reported as not checked here and never counted toward the quorum.
//  - RFC 9162 section 2.1.3.2: the inclusion proof of leaf hash SHA-256(0x00 || leaf).
// Everything shown is set with textContent: nothing fetched ever becomes markup.
"use strict";

(function () {
  const enc = new TextEncoder();

  function b64decode(text) {
    if (typeof text !== "string" || !/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4) {
      throw new Error("malformed base64");
    }
    const bin = atob(text);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  function hex(bytes) {
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function concat(...parts) {
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  }

  function equal(a, b) {
    return a.length === b.length && a.every((x, i) => x === b[i]);
  }

  async function sha256(bytes) {
    return new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  }

  async function ed25519Verify(publicKey, signature, message) {
    const key = await crypto.subtle.importKey("raw", publicKey, { name: "Ed25519" }, false, [
      "verify",
    ]);
    return crypto.subtle.verify({ name: "Ed25519" }, key, signature, message);
  }

  const MLDSA44 = 0x06;

  // A verifier key "name+hex8+base64(type || key)", its key ID checked: Ed25519 (types
  // 0x01 and 0x04, 32-byte keys) or ML-DSA-44 (type 0x06, 1312-byte keys). An error names
  // ``which`` key it is.
  async function parseVerifierKey(vkey, which) {
    try {
      return await parseKey(vkey);
    } catch (err) {
      throw new Error(which + ": " + err.message);
    }
  }

  async function parseKey(vkey) {
    // Key names never contain "+", but base64 may: split at the first two only.
    const m = /^([^+]+)\+([0-9a-f]{8})\+(.+)$/.exec(vkey.trim());
    if (!m) throw new Error("malformed verifier key");
    const parts = m.slice(1);
    const raw = b64decode(parts[2]);
    const sizes = { 1: 33, 4: 33, 6: 1313 };
    if (raw.length !== sizes[raw[0]]) throw new Error("not an Ed25519 or ML-DSA-44 verifier key");
    const type = raw[0];
    const publicKey = raw.slice(1);
    const id = (await sha256(concat(enc.encode(parts[0] + "\n"), raw))).slice(0, 4);
    if (hex(id) !== parts[1]) throw new Error("key ID does not match the key");
    // An ML-DSA-44 key is some 1,760 characters: reports name it by name and key ID.
    const text = type === MLDSA44 ? parts[0] + "+" + parts[1] + " (ML-DSA-44)" : vkey.trim();
    return { name: parts[0], id, type, publicKey, text };
  }

  // A signed note: its text and signature lines (structure only).
  function parseNote(note) {
    const split = note.lastIndexOf("\n\n");
    if (!note.endsWith("\n") || split < 0) throw new Error("malformed note");
    const text = note.slice(0, split + 1);
    const lines = note.slice(split + 2, -1).split("\n");
    const signatures = lines.map((line) => {
      const m = /^\u2014 (\S+) (\S+)$/.exec(line);
      if (!m) throw new Error("malformed signature line");
      const raw = b64decode(m[2]);
      if (raw.length < 5) throw new Error("signature too short");
      return { name: m[1], id: raw.slice(0, 4), sig: raw.slice(4) };
    });
    return { text, signatures };
  }

  function parseCheckpoint(text) {
    const lines = text.slice(0, -1).split("\n");
    if (lines.length < 3 || !/^(0|[1-9][0-9]{0,18})$/.test(lines[1])) {
      throw new Error("malformed checkpoint");
    }
    const root = b64decode(lines[2]);
    if (root.length !== 32) throw new Error("malformed root hash");
    return { origin: lines[0], size: Number(lines[1]), root };
  }

  function linesBy(note, key) {
    return note.signatures.filter((s) => s.name === key.name && equal(s.id, key.id));
  }

  async function verifyLogSignature(note, key) {
    if (key.type !== 0x01) throw new Error("the log key is not an Ed25519 note key");
    const lines = linesBy(note, key);
    if (lines.length === 0) return false;
    for (const line of lines) {
      if (!(await ed25519Verify(key.publicKey, line.sig, enc.encode(note.text)))) return false;
    }
    return true;
  }

  // The first three lines of a checkpoint body, each with its newline.
  function treeLines(text) {
    return text.split("\n").slice(0, 3).join("\n") + "\n";
  }

  // { time, treeLines } for the newest verified cosignature, null if the key has no line,
  // { unchecked: true } for an ML-DSA-44 key that has one, or throws on a bad one.
  async function verifyCosignature(note, key) {
    if (key.type === MLDSA44) {
      return linesBy(note, key).length ? { unchecked: true } : null;
    }
    if (key.type !== 0x04) throw new Error("a witness key must be a cosigner (0x04 or 0x06) key");
    let newest = null;
    for (const line of linesBy(note, key)) {
      if (line.sig.length !== 72) throw new Error("bad cosignature by " + key.name);
      let t = 0n;
      for (const b of line.sig.slice(0, 8)) t = (t << 8n) | BigInt(b);
      const header = "cosignature/v1\ntime " + t.toString() + "\n";
      const signature = line.sig.slice(8);
      let lines = false;
      if (!(await ed25519Verify(key.publicKey, signature, enc.encode(header + note.text)))) {
        const three = treeLines(note.text);
        lines =
          key.treeLines &&
          three !== note.text &&
          (await ed25519Verify(key.publicKey, signature, enc.encode(header + three)));
        if (!lines) throw new Error("bad cosignature by " + key.name);
      }
      if (newest === null || t > newest.time) newest = { time: t, treeLines: lines };
    }
    return newest;
  }

  async function nodeHash(left, right) {
    return sha256(concat(Uint8Array.of(1), left, right));
  }

  // RFC 9162 section 2.1.3.2.
  async function verifyInclusion(leafHash, index, size, proof, root) {
    if (!(index >= 0 && index < size) || proof.length > 64) return false;
    let fn = BigInt(index);
    let sn = BigInt(size - 1);
    let r = leafHash;
    for (const p of proof) {
      if (p.length !== 32 || sn === 0n) return false;
      if (fn & 1n || fn === sn) {
        r = await nodeHash(p, r);
        while (fn !== 0n && !(fn & 1n)) {
          fn >>= 1n;
          sn >>= 1n;
        }
      } else {
        r = await nodeHash(r, p);
      }
      fn >>= 1n;
      sn >>= 1n;
    }
    return sn === 0n && equal(r, root);
  }

  // The notice bytes inside a canonical notice leaf: {"notice":N,"signature":S,"type":"notice"}.
  function noticeBytes(leaf) {
    const entry = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(leaf));
    const s = entry.signature;
    const suffix = enc.encode(
      ',"signature":{"key_id":"' + s.key_id + '","sig":"' + s.sig + '"},"type":"notice"}',
    );
    const prefix = enc.encode('{"notice":');
    const tail = leaf.slice(leaf.length - suffix.length);
    if (!equal(leaf.slice(0, prefix.length), prefix) || !equal(tail, suffix)) {
      throw new Error("the leaf is not a canonical notice entry");
    }
    return { bytes: leaf.slice(prefix.length, leaf.length - suffix.length), keyId: s.key_id, sig: s.sig };
  }

  async function fetchOk(url, kind) {
    const response = await fetch(url, { cache: "no-store" });
    if (!response.ok) throw new Error("the authority answered " + response.status);
    return kind === "json" ? response.json() : response.text();
  }

  async function verify(section, report) {
    const index = Number(section.dataset.index);
    const shownLeaf = b64decode(section.dataset.leaf);
    const logKey = await parseVerifierKey(document.getElementById("log-key").value, "the log key");
    const witnessText = document.getElementById("witness-keys").value;
    const witnesses = [];
    for (const [n, line] of witnessText.split("\n").entries()) {
      const which = "the witness key on line " + (n + 1);
      // "<vkey>" or "<vkey> tree-lines" (a witness that may sign the first three lines only).
      const words = line.trim().split(/\s+/);
      if (!words[0]) continue;
      if (words.length > 2 || (words.length === 2 && words[1] !== "tree-lines")) {
        throw new Error(which + ": a verifier key, optionally followed by tree-lines");
      }
      const key = await parseVerifierKey(words[0], which);
      key.treeLines = words.length === 2;
      if (key.treeLines && key.type !== 0x04) {
        throw new Error(which + ": tree-lines applies to Ed25519 (0x04) witness keys only");
      }
      witnesses.push(key);
    }
    const quorum = witnesses.length ? Math.max(1, Number(section.dataset.quorum || "1")) : 0;

    const note = parseNote(await fetchOk(section.dataset.checkpointUrl, "text"));
    const checkpoint = parseCheckpoint(note.text);
    const logOk = checkpoint.origin === logKey.name && (await verifyLogSignature(note, logKey));
    report(logOk, "Checkpoint signature by the log key " + logKey.text + " (size " + checkpoint.size + ")");

    let cosigned = 0;
    let unchecked = 0;
    for (const w of witnesses) {
      try {
        const found = await verifyCosignature(note, w);
        if (found === null) {
          report(null, "No cosignature by witness " + w.text);
        } else if (found.unchecked) {
          unchecked += 1;
          report(
            null,
            "ML-DSA-44 cosignature by witness " + w.text + " cannot be checked in the browser " +
              "(WebCrypto has no ML-DSA), so it is not counted here; check it with deplog audit " +
              "checkpoint --policy",
          );
        } else {
          cosigned += 1;
          const when = new Date(Number(found.time) * 1000).toISOString();
          const form = found.treeLines
            ? " (over the tree lines only: origin, size and root, not the extension lines)"
            : "";
          report(true, "Cosignature by witness " + w.text + " at " + when + form);
        }
      } catch (err) {
        report(false, err.message + " (" + w.text + ")");
      }
    }
    if (witnesses.length) {
      const suffix = unchecked
        ? " (counting only cosignatures checked in this browser; " + unchecked +
          " ML-DSA-44 not checked)"
        : "";
      report(
        cosigned >= quorum,
        "Witness quorum: " + cosigned + " of " + quorum + " required" + suffix,
      );
    }

    const entries = await fetchOk(
      section.dataset.entriesUrl + "?start=" + index + "&end=" + (index + 1),
      "json",
    );
    const leaf = b64decode(entries.entries[0]);
    report(equal(leaf, shownLeaf), "The entry served by the log is the one shown on this page");

    const proof = await fetchOk(
      section.dataset.proofUrl + "?index=" + index + "&size=" + checkpoint.size,
      "json",
    );
    const leafHash = await sha256(concat(Uint8Array.of(0), shownLeaf));
    const hashes = proof.proof.map(b64decode);
    const included = await verifyInclusion(leafHash, index, checkpoint.size, hashes, checkpoint.root);
    report(included, "Inclusion proof: entry " + index + " is in the tree of size " + checkpoint.size);

    if (section.dataset.publisherKey) {
      const publisher = await parseVerifierKey(section.dataset.publisherKey, "the publisher key");
      const signed = noticeBytes(shownLeaf);
      const signedOk =
        publisher.type === 0x01 &&
        signed.keyId === hex(publisher.id) &&
        (await ed25519Verify(publisher.publicKey, b64decode(signed.sig), signed.bytes));
      const other = signed.keyId === hex(publisher.id) ? "" : " (the notice names key ID " + signed.keyId + ")";
      report(signedOk, "Notice signature by the publisher key " + publisher.text + other);
    }
  }

  function setUpVerification() {
    const section = document.getElementById("verification");
    const button = document.getElementById("verify-button");
    const out = document.getElementById("verify-result");
    if (!section || !button || !out) return;
    button.hidden = false;
    button.addEventListener("click", async () => {
      button.disabled = true;
      out.replaceChildren();
      out.className = "";
      const banner = document.createElement("p");
      banner.className = "banner";
      const list = document.createElement("ul");
      list.className = "checks";
      out.append(banner, list);
      let failed = false;
      const report = (ok, text) => {
        const item = document.createElement("li");
        item.className = ok === true ? "check-ok" : ok === false ? "check-failed" : "check-absent";
        item.textContent = (ok === true ? "✓ " : ok === false ? "✗ FAILED: " : "– ") + text;
        list.append(item);
        if (ok === false) failed = true;
      };
      banner.textContent = "Verifying…";
      try {
        await verify(section, report);
      } catch (err) {
        report(false, err.message);
      }
      out.className = failed ? "result-failed" : "result-verified";
      banner.textContent = failed
        ? "FAILED: this entry could not be verified. Do not trust what this page shows."
        : "VERIFIED in your browser.";
      const scope = document.createElement("p");
      scope.textContent =
        "This checks the entry's bytes (the raw entry below), not the page's summary of them.";
      banner.after(scope);
      button.disabled = false;
    });
  }

  function showLocalTimes() {
    for (const el of document.querySelectorAll("time.when")) {
      const d = new Date(el.getAttribute("datetime"));
      if (Number.isNaN(d.getTime())) continue;
      const local = document.createElement("span");
      local.className = "local-time";
      local.textContent = " (your time: " + d.toLocaleString() + ")";
      el.after(local);
    }
  }

  function setUpCopyButtons() {
    for (const button of document.querySelectorAll("button.copy")) {
      const source = document.getElementById(button.dataset.copy);
      if (!source || !navigator.clipboard) continue;
      button.hidden = false;
      button.addEventListener("click", async () => {
        await navigator.clipboard.writeText(source.textContent);
        button.textContent = "Copied";
      });
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    showLocalTimes();
    setUpCopyButtons();
    setUpVerification();
  });
})();
