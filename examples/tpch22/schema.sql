CREATE TABLE region (r_regionkey int PRIMARY KEY, r_name text, r_comment text);
CREATE TABLE nation (n_nationkey int PRIMARY KEY, n_name text, n_regionkey int, n_comment text);
CREATE TABLE part (p_partkey int PRIMARY KEY, p_name text, p_mfgr text, p_brand text, p_type text, p_size int, p_container text, p_retailprice numeric(15,2), p_comment text);
CREATE TABLE supplier (s_suppkey int PRIMARY KEY, s_name text, s_address text, s_nationkey int, s_phone text, s_acctbal numeric(15,2), s_comment text);
CREATE TABLE partsupp (ps_partkey int, ps_suppkey int, ps_availqty int, ps_supplycost numeric(15,2), ps_comment text, PRIMARY KEY (ps_partkey, ps_suppkey));
CREATE TABLE customer (c_custkey int PRIMARY KEY, c_name text, c_address text, c_nationkey int, c_phone text, c_acctbal numeric(15,2), c_mktsegment text, c_comment text);
CREATE TABLE orders (o_orderkey int PRIMARY KEY, o_custkey int, o_orderstatus text, o_totalprice numeric(15,2), o_orderdate date, o_orderpriority text, o_clerk text, o_shippriority int, o_comment text);
CREATE TABLE lineitem (l_orderkey int, l_partkey int, l_suppkey int, l_linenumber int, l_quantity numeric(15,2), l_extendedprice numeric(15,2), l_discount numeric(15,2), l_tax numeric(15,2), l_returnflag text, l_linestatus text, l_shipdate date, l_commitdate date, l_receiptdate date, l_shipinstruct text, l_shipmode text, l_comment text, PRIMARY KEY (l_orderkey, l_linenumber));
-- The foreign-key indexes every TPC-H setup on PostgreSQL has: without them PostgreSQL evaluates
-- Q17's and Q20's correlated subqueries by a scan of lineitem per outer row (hours at SF 1), and a
-- fast refresh that joins changed parts or customers back to lineitem or orders scans them whole.
CREATE INDEX lineitem_part_supp ON lineitem (l_partkey, l_suppkey);
CREATE INDEX lineitem_supp ON lineitem (l_suppkey);
CREATE INDEX orders_cust ON orders (o_custkey);
CREATE INDEX partsupp_supp ON partsupp (ps_suppkey);
CREATE INDEX customer_nation ON customer (c_nationkey);
CREATE INDEX supplier_nation ON supplier (s_nationkey);
