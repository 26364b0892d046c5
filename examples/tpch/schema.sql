-- A small TPC-H-style schema with deterministic data (no random()).
CREATE TABLE region   (r_regionkey integer PRIMARY KEY, r_name text NOT NULL);
CREATE TABLE nation   (n_nationkey integer PRIMARY KEY, n_name text NOT NULL, n_regionkey integer NOT NULL);
CREATE TABLE customer (
    c_custkey    integer PRIMARY KEY,
    c_name       text NOT NULL,
    c_nationkey  integer NOT NULL,
    c_mktsegment text NOT NULL,
    c_acctbal    numeric(15,2) NOT NULL
);
CREATE TABLE orders (
    o_orderkey    bigint PRIMARY KEY,
    o_custkey     integer NOT NULL,
    o_orderstatus char(1) NOT NULL,          -- O open, F fulfilled, P partial
    o_totalprice  numeric(15,2) NOT NULL,
    o_orderdate   date NOT NULL
);
CREATE TABLE lineitem (
    l_orderkey      bigint NOT NULL,
    l_linenumber    integer NOT NULL,
    l_quantity      numeric(15,2) NOT NULL,
    l_extendedprice numeric(15,2) NOT NULL,
    l_discount      numeric(15,2) NOT NULL,
    l_returnflag    char(1) NOT NULL,
    PRIMARY KEY (l_orderkey, l_linenumber)
);
CREATE INDEX ON orders (o_custkey);
CREATE INDEX ON customer (c_nationkey);

INSERT INTO region VALUES (0, 'AFRICA'), (1, 'AMERICA'), (2, 'ASIA'), (3, 'EUROPE'), (4, 'MIDDLE EAST');
INSERT INTO nation
SELECT i, (ARRAY['ALGERIA','ARGENTINA','BRAZIL','CANADA','EGYPT','ETHIOPIA','FRANCE','GERMANY','INDIA',
                 'INDONESIA','IRAN','IRAQ','JAPAN','JORDAN','KENYA','MOROCCO','MOZAMBIQUE','PERU','CHINA',
                 'ROMANIA','SAUDI ARABIA','VIETNAM','RUSSIA','UNITED KINGDOM','UNITED STATES'])[i + 1],
       (ARRAY[0,1,1,1,4,0,3,3,2,2,4,4,2,4,0,0,0,1,2,3,4,2,3,3,1])[i + 1]
FROM generate_series(0, 24) AS i;
INSERT INTO customer
SELECT i, 'Customer#' || lpad(i::text, 6, '0'), i % 25,
       (ARRAY['AUTOMOBILE','BUILDING','FURNITURE','MACHINERY','HOUSEHOLD'])[1 + i % 5],
       round(((i * 7919) % 1099999) / 100.0 - 999.99, 2)
FROM generate_series(1, 1000) AS i;
INSERT INTO orders
SELECT i, 1 + (i * 31) % 1000, (ARRAY['O','F','F','P'])[1 + i % 4], 0, date '2024-01-01' + (i % 900)
FROM generate_series(1, 10000) AS i;
INSERT INTO lineitem
SELECT o.o_orderkey, n, 1 + (o.o_orderkey * n) % 50, round(900 + ((o.o_orderkey * 17 + n * 101) % 100000), 2),
       ((o.o_orderkey + n) % 11) / 100.0, (ARRAY['N','R','A'])[1 + (o.o_orderkey + n) % 3]
FROM orders o, generate_series(1, 1 + (o_orderkey % 7)::int) AS n;
UPDATE orders o SET o_totalprice = t.total
FROM (SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS total FROM lineitem GROUP BY 1) t
WHERE t.l_orderkey = o.o_orderkey;
ANALYZE;
