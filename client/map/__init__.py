"""The verifiable tool-status map (``deplog-map/v1``), one concern per module.

The normative text is ``docs/fold-spec.md``; these modules are its executable form,
and the Python here is the definition (no other implementation runs):

* ``record``: a tool's status record (what the fold reads of each notice), its binary
  codec, and the map function ``fold_notices``;
* ``hashing``: keys and the tagged hashes;
* ``nodes``: the tree's rows and the storage seam (``NodeStore``), in memory;
* ``tree``: the prefix tree, its batch update and lookups, and the lookup check;
* ``proof``: map proofs, their binary and JSON forms, and their verification;
* ``line``: the checkpoint's ``deplog-map/v1`` extension line;
* ``verifiable``: ``VerifiableMap``, records over the tree, folded and proven;
* ``errors``: the map's error classes.

Where a holder keeps its map in SQL (the authority, a follower, the auditor, a
map-verifying witness):

* ``stored``: ``StoredMap``, the map in SQL tables, advanced in the caller's
  transactions;
* ``sqlstore``: the tables' DDL and the stores over them (rows, records);
* ``groups``: the stored form of inner nodes, fifteen to a row;
* ``cache`` and ``layer``: a writer's bounded cache and the rows it holds back.

The map imports only ``client/errors``, ``client/tlog``, ``client/model`` and
``client/plumbing/dbapi``, ``client/history`` for its SQL side.
"""
