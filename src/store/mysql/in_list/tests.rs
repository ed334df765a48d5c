use super::*;

#[test]
fn the_list_takes_one_placeholder_per_value() {
    let list = InList::new("UPDATE t SET a = ? WHERE seq IN (?) AND b > ?")
        .bind(1_i64)
        .bind_after(2_i64);
    assert_eq!(
        list.sql(3),
        "UPDATE t SET a = ? WHERE seq IN (?, ?, ?) AND b > ?"
    );
    assert_eq!(list.sql(1), "UPDATE t SET a = ? WHERE seq IN (?) AND b > ?");
    assert_eq!(list.before, vec![Param::Int(1)]);
    assert_eq!(list.after, vec![Param::Int(2)]);
}
