-- A small shop: customers and their orders. Deterministic data (no random()).
CREATE TABLE public.customers (
    id         integer PRIMARY KEY,
    name       text        NOT NULL,
    email      text,
    country    char(2)     NOT NULL,
    created_at timestamptz NOT NULL
);

CREATE TABLE public.orders (
    id          bigint        PRIMARY KEY,
    customer_id integer       NOT NULL REFERENCES public.customers (id),
    status      text          NOT NULL CHECK (status IN ('open', 'shipped', 'cancelled')),
    amount      numeric(12,2) NOT NULL,
    ordered_at  timestamp     NOT NULL,
    note        text
);

INSERT INTO public.customers
SELECT i,
       (ARRAY['Ada', 'Grace', 'Linus', 'Édith', 'Søren', '美咲', 'Zoë', 'Ken'])[1 + i % 8] || ' #' || i,
       CASE WHEN i % 5 = 0 THEN NULL ELSE 'c' || i || '@example.com' END,
       (ARRAY['DE', 'FR', 'US', 'JP', 'DK'])[1 + i % 5],
       timestamptz '2026-01-01 00:00:00+00' + i * interval '7 hours'
FROM generate_series(1, 200) AS i;

INSERT INTO public.orders
SELECT i,
       1 + (i * 37) % 200,
       (ARRAY['open', 'shipped', 'shipped', 'cancelled'])[1 + i % 4],
       round(((i * 7919) % 50000) / 100.0, 2),
       timestamp '2026-02-01 09:00:00' + i * interval '53 minutes',
       CASE WHEN i % 7 = 0 THEN 'gift wrap' END
FROM generate_series(1, 2000) AS i;
