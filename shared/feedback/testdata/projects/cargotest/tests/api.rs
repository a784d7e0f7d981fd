#[test]
fn add_is_commutative() {
    assert!(fbfixture::add(1, 2) == fbfixture::add(2, 1));
}

#[test]
fn add_zero() {
    if fbfixture::add(0, 0) != 0 {
        panic!("add(0, 0) should be 0, got {}", fbfixture::add(0, 0));
    }
}
