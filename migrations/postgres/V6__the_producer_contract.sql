-- outbox-relay PostgreSQL schema migration 6: the producer contract: an enqueue function for any language.
-- For schema "public", table prefix "outbox" (`outbox-relay migrate --print-sql` prints
-- it for yours). The relay embeds this file and runs these very statements.
-- Run in order, each once: a second run fails on the version it records, changing nothing.
--
-- Creates one function: nothing is locked.
BEGIN;
SET LOCAL statement_timeout = 900000;
SELECT pg_advisory_xact_lock(hashtextextended('outbox-relay migrate public', 0));
SET LOCAL lock_timeout = 5000;
INSERT INTO "public"."outbox_migrations" (version, name) VALUES (6, 'the producer contract: an enqueue function for any language');
-- The producer contract: one message, in the caller's transaction, validated, deduplicated
-- and marked as the Rust enqueue does (see the README, "Enqueue from any language").
-- Parameters are named as the columns; `#variable_conflict use_variable` makes a bare name
-- the parameter, so every column below is qualified.
CREATE OR REPLACE FUNCTION "public"."outbox_enqueue"(
    lane text,
    target text,
    payload json,
    ordering_key text DEFAULT NULL,
    dedupe_key text DEFAULT NULL,
    headers jsonb DEFAULT '{}',
    delay interval DEFAULT '0 seconds',
    max_attempts bigint DEFAULT 5,
    OUT outbox_id uuid,
    OUT duplicate boolean)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_variable
DECLARE
    v_field text;
    v_value text;
    v_bad text;
    v_size bigint;
    v_header_bytes bigint := 0;
    v_header record;
    v_existing record;
BEGIN
    FOR v_field, v_value IN VALUES ('lane', lane), ('target', target) LOOP
        IF v_value IS NULL OR v_value ~ '^\s*$' THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('invalid %s: is required', v_field);
        END IF;
        IF octet_length(v_value) > 64 THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
                'invalid %s: is %s characters, over the limit of 64',
                v_field, octet_length(v_value));
        END IF;
        v_bad := substring(v_value FROM '[^A-Za-z0-9_.:-]');
        IF v_bad IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
                'invalid %s: contains %L; use only letters, digits, ''_'', ''-'', ''.'', '':''',
                v_field, v_bad);
        END IF;
    END LOOP;
    FOR v_field, v_value IN VALUES ('ordering_key', ordering_key), ('dedupe_key', dedupe_key) LOOP
        CONTINUE WHEN v_value IS NULL;
        IF v_value ~ '^\s*$' THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('invalid %s: must not be blank', v_field);
        END IF;
        IF octet_length(v_value) > 256 THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
                'invalid %s: is %s bytes, over the limit of 256',
                v_field, octet_length(v_value));
        END IF;
        v_bad := substring(v_value FROM '[[:cntrl:]]');
        IF v_bad IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
                'invalid %s: contains the control character %L', v_field, v_bad);
        END IF;
    END LOOP;
    IF max_attempts IS NULL OR max_attempts <= 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'invalid max_attempts: must be greater than zero';
    END IF;
    IF max_attempts > 4294967295 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'invalid max_attempts: is over the limit of 4294967295';
    END IF;
    IF delay IS NULL OR delay < interval '0 seconds' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'invalid delay: must not be negative';
    END IF;
    IF headers IS NULL OR jsonb_typeof(headers) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'invalid headers: must be a JSON object of strings';
    END IF;
    IF (SELECT count(*) FROM jsonb_object_keys(headers)) > 64 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
            'invalid headers: are %s, over the limit of 64',
            (SELECT count(*) FROM jsonb_object_keys(headers)));
    END IF;
    FOR v_header IN SELECT h.key, h.value FROM jsonb_each(headers) h ORDER BY h.key COLLATE "C" LOOP
        IF v_header.key = '' THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'invalid headers: a header name is empty';
        END IF;
        IF octet_length(v_header.key) > 128 THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
                'invalid headers.%s: name is over the limit of 128 characters',
                v_header.key);
        END IF;
        v_bad := substring(v_header.key FROM '[^A-Za-z0-9!#$%&''*+.^_`|~-]');
        IF v_bad IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
                'invalid headers.%s: name contains %L, which a header name cannot hold',
                v_header.key, v_bad);
        END IF;
        IF jsonb_typeof(v_header.value) <> 'string' THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
                'invalid headers.%s: value must be a string', v_header.key);
        END IF;
        v_value := v_header.value #>> '{}';
        IF octet_length(v_value) > 8192 THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
                'invalid headers.%s: value is %s bytes, over the limit of 8192',
                v_header.key, octet_length(v_value));
        END IF;
        IF v_value ~ '[\r\n]' THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
                'invalid headers.%s: value contains a line break or NUL', v_header.key);
        END IF;
        v_header_bytes := v_header_bytes + octet_length(v_header.key) + octet_length(v_value);
    END LOOP;
    IF payload IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'invalid payload: is required';
    END IF;
    -- json keeps an escaped NUL as text; jsonb, the cast below, refuses it.
    IF strpos(payload::text, '\u0000') > 0 THEN
        BEGIN
            PERFORM payload::jsonb;
        EXCEPTION WHEN untranslatable_character THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'invalid payload: contains a NUL '
                'character (\u0000), which PostgreSQL cannot store; no store accepts it';
        END;
    END IF;
    v_size := octet_length(payload::text);
    IF v_size > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
            'invalid payload: is %s bytes, over the limit of 1048576 bytes', v_size);
    END IF;
    IF v_size + v_header_bytes > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
            'invalid headers: make the message %s bytes (payload %s, headers %s), over the limit of 1048576 bytes',
            v_size + v_header_bytes, v_size, v_header_bytes);
    END IF;

    duplicate := false;
    IF dedupe_key IS NULL THEN
        INSERT INTO "public"."outbox_messages" AS m (lane, target, payload, headers, ordering_key, max_attempts,
                              available_at, key_head)
        VALUES (lane, target, payload, headers, ordering_key, max_attempts, now() + delay,
                ordering_key IS NULL OR NOT (EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = lane AND e.target = target AND e.ordering_key = ordering_key AND e.status = 'pending') OR EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = lane AND e.target = target AND e.ordering_key = ordering_key AND e.status = 'claimed')))
        RETURNING m.outbox_id INTO outbox_id;
    ELSE
        -- A concurrent enqueue of the same key: the INSERT waits for it, then fails on the
        -- dedupe index, and the next round reads the row it committed.
        FOR attempt IN 1..3 LOOP
            SELECT m.outbox_id, m.payload::text AS payload, m.headers, m.ordering_key,
                   m.max_attempts
              INTO v_existing
              FROM "public"."outbox_messages" m
             WHERE m.lane = lane AND m.target = target AND m.dedupe_key = dedupe_key;
            IF FOUND THEN
                IF v_existing.payload = payload::text AND v_existing.headers = headers
                   AND v_existing.ordering_key IS NOT DISTINCT FROM ordering_key
                   AND v_existing.max_attempts = max_attempts THEN
                    outbox_id := v_existing.outbox_id;
                    duplicate := true;
                    RETURN;
                END IF;
                RAISE EXCEPTION USING ERRCODE = '23505', MESSAGE = format(
                    'conflict: dedupe_key %s in lane %s, target %s is already used by message %s with different content',
                    to_json(dedupe_key), to_json(lane), to_json(target), v_existing.outbox_id);
            END IF;
            BEGIN
                INSERT INTO "public"."outbox_messages" AS m (lane, target, payload, headers, ordering_key, dedupe_key,
                                      max_attempts, available_at, key_head)
                VALUES (lane, target, payload, headers, ordering_key, dedupe_key, max_attempts,
                        now() + delay, ordering_key IS NULL OR NOT (EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = lane AND e.target = target AND e.ordering_key = ordering_key AND e.status = 'pending') OR EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = lane AND e.target = target AND e.ordering_key = ordering_key AND e.status = 'claimed')))
                RETURNING m.outbox_id INTO outbox_id;
                EXIT;
            EXCEPTION WHEN unique_violation THEN
                IF attempt = 3 THEN
                    RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE =
                        'a dedupe key''s holder kept vanishing before it could be read';
                END IF;
            END;
        END LOOP;
    END IF;
    PERFORM pg_notify('public.outbox', lane || E'\t' || target);
END
$fn$;
COMMENT ON FUNCTION "public"."outbox_enqueue"(text, text, json, text, text, jsonb, interval, bigint) IS
    'outbox-relay: enqueue one message in the caller''s transaction (README: Enqueue from any language)';
COMMIT;
